"""``serve``: run the HTTP API over a DuckDB file or a PostgreSQL database with uvicorn.

One process owns a DuckDB file. While it serves one, it writes ``<db>.server.json`` (readable by
its owner only) with the server's URL, process id, token, database and a random server id (which
``GET /health`` answers with too), so that ``wfkit signal`` and friends, finding the file locked,
can send their request to the server instead (:mod:`wfkit.api.discovery` says how the file is
checked first). The file is removed and the engine closed when the server stops (Ctrl-C or
SIGTERM). A PostgreSQL database is shared by any number of engines, so serving one writes no
such file: the other commands open the database themselves.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import json
import os
import secrets
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from wfkit.api.app import API_PREFIX, create_app, new_server_id
from wfkit.api.auth import TOKEN_ENV, resolve_token
from wfkit.api.discovery import ServerInfo, running_server, sidecar_path
from wfkit.definition.workflow import Workflow
from wfkit.engine import Engine
from wfkit.engine.logformat import configure_logging
from wfkit.engine.queues import served_queues
from wfkit.errors import UsageError
from wfkit.worker import is_shared_url, safe_url

__all__ = [
    "ServerInfo",
    "load_modules",
    "running_server",
    "serve",
    "sidecar_path",
]


def load_modules(names: Sequence[str]) -> list[ModuleType]:
    """Import the modules that define activities and workflows.

    A name is a dotted module (found from the current folder too) or a path to a ``.py`` file,
    imported under its stem with its folder on ``sys.path`` (so models it defines can be found
    again by ``module:Class``).
    """
    if "" not in sys.path:
        sys.path.insert(0, "")
    return [_load(name) for name in names]


def _load(name: str) -> ModuleType:
    if not name.endswith(".py"):
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            raise UsageError(
                f"cannot import module {name!r} ({exc}); run from the folder that holds it, "
                "put it on PYTHONPATH, or pass the path to its .py file"
            ) from exc
    path = Path(name).resolve()
    if not path.is_file():
        raise UsageError(f"no such file: {name}; pass an existing .py file or a module name")
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    if path.stem in sys.modules:
        return sys.modules[path.stem]
    return importlib.import_module(path.stem)


def tune_gc() -> None:
    """Garbage collection for a long-running server process (``wfkit serve``, ``wfkit worker``).

    A service allocates a lot and keeps little: with Python's default thresholds the cyclic
    collector ran ~600 times in 3,200 starts and its pauses were the p99 of a start (107 ms
    against 34 ms with it off). Objects loaded at start-up (modules, definitions) are frozen
    out of every collection, and collections run ~15x less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


def _workflows(modules: Sequence[ModuleType]) -> list[Workflow]:
    found: dict[tuple[str, int], Workflow] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Workflow):
                found.setdefault((value.id, value.version), value)
    return list(found.values())


class _Server(uvicorn.Server):
    """uvicorn, writing the sidecar file once it listens."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_started()


class _Stop(Exception):
    """A SIGINT or SIGTERM arrived outside uvicorn's own handling."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn SIGINT/SIGTERM into ``_Stop`` so clean-up runs (uvicorn re-raises them at its end)."""
    if sys.platform == "win32":
        yield
        return
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {host}:{port} ({exc}); pick another --port (0 picks a free one) "
            "or stop what uses it"
        ) from exc
    return sock


def _url(host: str, sock: socket.socket) -> str:
    port = sock.getsockname()[1]
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _write_private(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON readable by its owner only (0600), replacing any earlier file atomically.

    The file holds the token, and the database's folder may be shared: it is written to a new
    file of unpredictable name in the same folder, created exclusively (never a file or link
    someone else made first) with mode 0600 from the start, then renamed into place.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    while True:
        temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(temp, flags, 0o600)
        except FileExistsError:  # 64 random bits taken: pick again
            continue
        break
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(payload, out)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def _remove_if_ours(path: Path, server_id: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if json.loads(path.read_text(encoding="utf-8")).get("server_id") == server_id:
            path.unlink()


def _shown(db: str | Path) -> str:
    """The database as messages show it: a URL without its password, or the file's path."""
    return safe_url(str(db)) if is_shared_url(str(db)) else str(Path(db).resolve())


def serve(
    db: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    modules: Sequence[str] = (),
    threads: int = 4,
    *,
    queues: Sequence[str] | None = None,
    max_body: int | None = None,
    access_log: bool = True,
    docs: bool = False,
    metrics_public: bool = False,
    log_format: str = "text",
) -> None:
    """Serve the HTTP API over the DuckDB file or PostgreSQL database ``db`` until SIGINT or
    SIGTERM.

    Parameters
    ----------
    db : str or Path
        The DuckDB file, which this process owns while serving (it writes ``<db>.server.json``
        for the other commands), or a ``postgresql://`` URL, which any number of engines
        share (the server takes its runs through leases, as ``wfkit worker`` does, and writes
        no server file).
    host, port : str, int
        Where to listen; port 0 picks a free port (the start line and the server file say
        which).
    token : str, optional
        The bearer token; ``WFKIT_API_TOKEN`` or a generated one (printed once) by default.
    modules : sequence of str
        Modules (or ``.py`` files) to import: their activities register themselves, and every
        module-level ``Workflow`` is registered with the engine.
    threads : int
        Engine worker threads.
    queues : sequence of str, optional
        Run only the steps of these activity queues (every queue by default).
    max_body : int, optional
        Largest request body accepted, in bytes; by default the largest payload the engine
        accepts (256 KiB) plus 64 KiB for the JSON around it.
    docs : bool
        Serve Swagger UI at ``/api/v1/docs`` (it loads its scripts from a CDN).
    metrics_public : bool
        Serve ``GET /metrics`` without the token (behind it by default).
    log_format : str
        ``text`` (Python's and uvicorn's own formats) or ``json`` (one object per line, on
        stderr; see :mod:`wfkit.engine.logformat`).

    Raises
    ------
    StoreError
        When another process holds ``db``.
    UsageError
        When the token is weak (:func:`wfkit.api.auth.check_token`), a module cannot be
        imported, the address cannot be bound or the sidecar file cannot be written.
    """
    token, generated = resolve_token(token)
    served = served_queues(list(queues) if queues else None)
    configure_logging(log_format)
    with _stop_on_signals():
        try:
            _serve(
                db,
                host,
                port,
                token,
                generated,
                load_modules(modules),
                threads,
                max_body,
                access_log,
                docs,
                served,
                metrics_public,
                log_format == "json",
            )
        except _Stop:
            pass
    print(f"wfkit serve stopped; {_shown(db)} is closed", flush=True)


def _serve(
    db: str | Path,
    host: str,
    port: int,
    token: str,
    generated: bool,
    modules: Sequence[ModuleType],
    threads: int,
    max_body: int | None,
    access_log: bool,
    docs: bool,
    queues: frozenset[str] | None = None,
    metrics_public: bool = False,
    json_logs: bool = False,
) -> None:
    sidecar = None if is_shared_url(str(db)) else sidecar_path(db)
    server_id = new_server_id()
    engine = Engine(db)
    sock: socket.socket | None = None
    try:
        for flow in _workflows(modules):
            engine.register(flow)
        app = create_app(
            engine,
            token,
            max_body=max_body,
            docs=docs,
            metrics_public=metrics_public,
            server_id=server_id,
        )
        sock = _bind(host, port)
        url = _url(host, sock)
        config = uvicorn.Config(
            app,
            log_level="info",
            access_log=access_log,
            timeout_graceful_shutdown=10,
            # JSON logs: uvicorn's records reach the root logger's JSON handler
            log_config=None if json_logs else LOGGING_CONFIG,
        )
        info = {
            "url": url,
            "pid": os.getpid(),
            "token": token,
            "db": _shown(db),
            "server_id": server_id,
        }
        server = _Server(config, lambda: _announce(sidecar, info, engine, generated, docs))
        engine.start_workers(threads, queues=queues)
        tune_gc()
        server.run(sockets=[sock])
    finally:
        if sidecar is not None:
            _remove_if_ours(sidecar, server_id)
        if sock is not None:
            sock.close()
        engine.close()


def _announce(
    sidecar: Path | None, info: dict[str, Any], engine: Engine, generated: bool, docs: bool
) -> None:
    try:
        if sidecar is not None:  # PostgreSQL: the other commands open the database themselves
            _write_private(sidecar, info)
    except OSError as exc:
        raise UsageError(
            f"cannot write {sidecar} ({exc.strerror or exc}); the other wfkit commands find the "
            "server through it: if something else is at that path, move it away (or serve a "
            "database in a folder of your own) and start the server again"
        ) from exc
    flows = ", ".join(f"{w} v{max(v)}" for w, v in engine.workflows().items()) or "none"
    where = f"{info['url']}{API_PREFIX}"
    described = f"docs at {where}/docs" if docs else f"OpenAPI at {where}/openapi.json"
    print(
        f"wfkit serve: {where} ({described}) on {info['db']}; workflows: {flows}",
        flush=True,
    )
    if generated:
        print(
            f"token (shown once; set {TOKEN_ENV} to choose one): {info['token']}",
            flush=True,
        )
