"""Operating on a DuckDB file from another process: directly when it is free, else via its server.

One process owns a DuckDB file. ``operate(db)`` opens the engine on ``db`` when nobody holds it,
and otherwise, when ``wfkit serve`` holds it (its ``<db>.server.json`` names a live process),
returns an :class:`ApiClient` of that server, whose methods mirror the engine's. A sidecar file
whose process is alive but does not answer as a wfkit server (the process id was reused, or the
server is stuck) is refused with a message naming the file and how to remove it.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wfkit.api.client import ApiClient, NoServer
from wfkit.api.server import ServerInfo, running_server, sidecar_path
from wfkit.definition.values import MAX_DEPTH, TOO_DEEP
from wfkit.engine import Engine
from wfkit.errors import StoreError, UsageError

__all__ = ["active_versions", "operate", "parse_payload", "run_status", "whoami"]


@contextlib.contextmanager
def operate(db: str | Path) -> Iterator[tuple[Engine | ApiClient, str]]:
    """The engine on ``db`` or a client of the server holding it, and words saying which.

    The words are ``""`` for the file itself and ``" (via the server at URL)"`` for a server.

    Raises
    ------
    UsageError
        When ``db`` does not exist and no server holds it.
    StoreError
        When another process (not a wfkit server) holds ``db``, or ``<db>.server.json`` names a
        live process that does not answer as a wfkit server.
    """
    path = Path(db)
    server = running_server(path)
    if server is None and not path.is_file():
        raise UsageError(f"no such file: {path}; point --db at a wfkit DuckDB file")
    if server is None:
        if "" not in sys.path:  # payload models in modules of the current folder can be found
            sys.path.insert(0, "")
        try:
            engine = Engine(path)
        except StoreError:
            server = running_server(path)  # a server may have taken the file just now
            if server is None:
                raise
        else:
            with engine:
                yield engine, ""
            return
    client = ApiClient(server.url, server.token)
    try:
        client.health()
    except NoServer as exc:
        raise StoreError(_stale(path, server, exc)) from None
    yield client, f" (via the server at {server.url})"


def _stale(db: Path, server: ServerInfo, why: NoServer) -> str:
    """What to do about a sidecar file whose live process is not an answering wfkit server."""
    sidecar = sidecar_path(db)
    return (
        f"{sidecar} says a wfkit server (process {server.pid}) serves {db} at {server.url}, "
        f"but {why}. Check what process {server.pid} is ('ps -p {server.pid} -o args='): if "
        f"it is no 'wfkit serve' on {db}, the file is stale: remove it with "
        f"'rm {shlex.quote(str(sidecar))}' and run the command again; if it is, the server is "
        "stuck: stop it (SIGTERM removes the file) and start it again"
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
