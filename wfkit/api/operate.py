"""Operating on a database from another process: directly when it is free, else via its server.

One process owns a DuckDB file. ``operate(db)`` opens the engine on ``db`` when nobody holds it,
and otherwise, when ``wfkit serve`` holds it, returns an :class:`ApiClient` of that server, whose
methods mirror the engine's. The server is found through ``<db>.server.json``, which is trusted
only once :func:`~wfkit.api.discovery.discover` has checked it and the server it names has
proven that it wrote it: a file that fails is named in a warning and ignored, and the file is
used directly; where another process holds it, the command is refused and nothing is sent to
the address the untrusted file names. A PostgreSQL database is shared by any number of
engines: ``operate`` opens it directly, whoever else serves it.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from wfkit.api.client import ApiClient
from wfkit.api.discovery import Discovery, discover
from wfkit.definition.values import MAX_DEPTH, TOO_DEEP
from wfkit.engine import Engine
from wfkit.errors import StoreError, UsageError
from wfkit.worker import is_shared_url

__all__ = [
    "active_versions",
    "held_elsewhere",
    "open_file",
    "operate",
    "parse_payload",
    "run_status",
    "warn",
    "whoami",
]


def warn(message: str) -> None:
    """One line on stderr, ``warning: <message>``: what the command ignored, and why."""
    print(f"warning: {' '.join(message.split())}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def operate(
    db: str | Path, *, warned: Callable[[str], None] = warn
) -> Iterator[tuple[Engine | ApiClient, str]]:
    """The engine on ``db`` or a client of the server holding it, and words saying which.

    The words are ``""`` for the database itself and ``" (via the server at URL)"`` for a
    server. ``warned`` receives the line saying which server file was ignored and why, when
    the command goes on with the file itself.

    Raises
    ------
    UsageError
        When ``db`` does not exist and no server holds it.
    StoreError
        When another process holds ``db`` and no trusted server file names it (the message
        names the file that was ignored, and why).
    """
    if "" not in sys.path:  # payload models in modules of the current folder can be found
        sys.path.insert(0, "")
    if is_shared_url(str(db)):
        with Engine(str(db)) as engine:
            yield engine, ""
        return
    path = Path(db)
    found = discover(path)
    server = found.server
    if server is None:
        if not path.is_file():
            if found.warning is not None:
                warned(found.warning)
            raise UsageError(f"no such file: {path}; point --db at a wfkit DuckDB file")
        try:
            engine = open_file(path, found, lambda: Engine(path), warned)
        except StoreError:
            server = discover(path).server  # a server may have taken the file just now
            if server is None:
                raise
        else:
            with engine:
                yield engine, ""
            return
    yield ApiClient(server.url, server.token), f" (via the server at {server.url})"


def open_file(
    db: Path,
    found: Discovery,
    open_engine: Callable[[], Engine],
    warned: Callable[[str], None] = warn,
) -> Engine:
    """``open_engine()`` on the DuckDB file ``db``, which no proven server holds.

    When ``<db>.server.json`` was ignored, ``warned`` says so once the file is open; when
    another process holds the file, the ``StoreError`` names the ignored server file and why.
    """
    try:
        engine = open_engine()
    except StoreError as exc:
        if found.refused is None:
            raise
        raise StoreError(held_elsewhere(db, found, exc)) from exc
    if found.warning is not None:
        warned(found.warning)
    return engine


def held_elsewhere(db: Path, found: Discovery, exc: StoreError) -> str:
    """The refusal when another process holds ``db`` and no server file could be trusted."""
    if found.refused is None:
        return str(exc)
    held = f"{db} is held by another process ({exc.__cause__ or exc})"
    sidecar = shlex.quote(str(found.file))
    if found.named is None:  # not the user's own file: it says nothing worth believing
        return (
            f"{held}, and {found.warning}; nothing was sent to the address it names. If a "
            f"'wfkit serve' of yours holds {db}, stop it and start it again (it writes a new "
            f"server file); remove {sidecar} if you did not make it"
        )
    pid = found.named.pid
    return (
        f"{held}, and {found.warning}; nothing was sent to it. Check what process {pid} is "
        f"('ps -p {pid} -o args='): if it is a 'wfkit serve' on {db}, stop it (SIGTERM) and "
        "start it again, which writes a new server file; if it is not, the file is stale: "
        f"remove it with 'rm {sidecar}' and find what holds {db}"
    )


def run_status(target: Engine | ApiClient, run_id: str) -> str:
    """The status of run ``run_id``, from the engine or the server."""
    if isinstance(target, Engine):
        return target.run(run_id).status.value
    return target.status(run_id)


def active_versions(target: Engine | ApiClient, workflow_id: str) -> list[int]:
    """The versions of ``workflow_id`` that take new runs, from the engine or the server."""
    if isinstance(target, Engine):
        found = target.definitions()
        return [d.version for d in found if d.workflow_id == workflow_id and d.active]
    return target.active_versions(workflow_id)


def parse_payload(text: str) -> dict[str, Any]:
    """A signal payload given as JSON text; it must be an object."""
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise UsageError(
            f"the payload is not JSON ({exc}); write an object like '{{\"amount\": 42}}'"
        ) from None
    except RecursionError:  # the parser gives up at about 1,000 levels
        raise UsageError(
            f"the payload is {TOO_DEEP} (the values wfkit stores nest at most {MAX_DEPTH} "
            "levels deep); flatten it"
        ) from None
    if not isinstance(payload, dict):
        raise UsageError(
            f"the payload must be a JSON object, not {type(payload).__name__}; "
            "wrap it, e.g. '{\"value\": ...}'"
        )
    return payload


def whoami(actor: str | None) -> str:
    """``actor``, or the login name of the user running the command."""
    if actor:
        return actor
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "wfkit-cli"
