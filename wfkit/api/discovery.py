"""Finding the ``wfkit serve`` that holds a DuckDB file, without trusting a planted file.

While it serves, ``wfkit serve`` writes ``<db>.server.json`` (:mod:`wfkit.api.server`) with its
URL, process id, token, the database it serves and a random server id. The other commands read
that file to send their requests to the server, so a file someone else put there would receive
their token and payloads. The file is trusted only when

1. it is a regular file (not a symbolic link, FIFO or folder) owned by the user running the
   command, whom alone it lets read or write it (mode 0600, as a server writes it);
2. it is the server file of this very database, and its process is alive; and
3. the server at its address answers ``GET /health``, asked without the token, with the
   file's server id.

Only then is anything sent with the token. A file that fails a check is ignored, and
:class:`Discovery` says why, naming the file; a file whose process is gone is stale and is
ignored without a word, as a server killed with SIGKILL leaves one behind.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wfkit.api.client import ApiClient, NoServer
from wfkit.errors import StoreError

__all__ = [
    "PROBE_TIMEOUT",
    "Discovery",
    "ServerInfo",
    "discover",
    "running_server",
    "sidecar_path",
]

PROBE_TIMEOUT = 10.0
"""Seconds to wait for the answer to ``GET /health`` from the server a file names."""
_MAX_SIZE = 64 * 1024  # a server file is a few hundred bytes; never read a huge one whole


@dataclass(frozen=True)
class ServerInfo:
    """What ``<db>.server.json`` says about the server holding a database."""

    url: str
    pid: int
    token: str
    server_id: str  # the random id the server's /health answers with
    db: str  # the absolute path of the database it serves


@dataclass(frozen=True)
class Discovery:
    """What ``<db>.server.json`` told about the server of a database, once checked.

    ``server`` is set only when every check passed. ``refused`` says why a file that exists was
    not trusted; ``named`` is what a file that passed the file checks (so one the user's own
    server wrote) says, when its server could not prove itself.
    """

    file: Path
    server: ServerInfo | None = None
    refused: str | None = None
    named: ServerInfo | None = None

    @property
    def warning(self) -> str | None:
        """``ignored <file>: <why>``, or None when nothing was refused."""
        return None if self.refused is None else f"ignored {self.file}: {self.refused}"


class _Refused(Exception):
    """The server file fails a check; the message says which, in words after "ignored FILE:"."""


def sidecar_path(db: str | Path) -> Path:
    """Where the server of ``db`` writes its URL, pid and token: ``<db>.server.json``."""
    return Path(f"{db}.server.json")


def running_server(db: str | Path) -> ServerInfo | None:
    """The server holding ``db``, proven as :func:`discover` does, or None."""
    return discover(db).server


def discover(db: str | Path, *, timeout: float = PROBE_TIMEOUT) -> Discovery:
    """Read and check ``<db>.server.json``: the server holding ``db``, or why there is none.

    Parameters
    ----------
    db : str or Path
        The DuckDB file.
    timeout : float
        Seconds to wait for the server's ``/health``.

    Returns
    -------
    Discovery
        ``server`` when the file passed every check; ``refused`` when a file exists but was
        not trusted; neither when there is no file, or it names a process that is gone.
    """
    file = sidecar_path(db)
    try:
        text = _read_own(file)
        if text is None:
            return Discovery(file)
        info = _parse(text)
        served = os.path.realpath(db)
        if info.db != served:
            raise _Refused(f"it is the server file of {info.db}, not of {served}")
    except _Refused as exc:
        return Discovery(file, refused=str(exc))
    if not _alive(info.pid):
        return Discovery(file)  # stale: its server is gone
    why = _unproven(info, timeout)
    if why is not None:
        return Discovery(file, refused=why, named=info)
    return Discovery(file, server=info)


def _read_own(file: Path) -> str | None:
    """The text of ``file`` when it is a regular file of this user's alone; None if missing."""
    try:
        _check(os.lstat(file))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _Refused(f"it cannot be examined ({exc.strerror or exc})") from None
    # O_NONBLOCK: a FIFO swapped in after the look above must not hang the command
    flags = os.O_RDONLY
    for extra in ("O_NONBLOCK", "O_NOFOLLOW", "O_CLOEXEC"):  # not all exist on Windows
        flags |= getattr(os, extra, 0)
    try:
        fd = os.open(file, flags)
    except FileNotFoundError:
        return None  # its server stopped just now
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Refused(_SYMLINK) from None
        raise _Refused(f"it cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as opened:
        _check(os.fstat(opened.fileno()))  # what was opened, which may not be what was looked at
        data = opened.read(_MAX_SIZE + 1)
    if len(data) > _MAX_SIZE:
        raise _Refused(f"it is larger than any server file (over {_MAX_SIZE // 1024} KiB)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused("it is not a server file wfkit wrote (it is not UTF-8 text)") from None


_SYMLINK = "it is a symbolic link (a wfkit server writes a regular file there)"


def _check(found: os.stat_result) -> None:
    """Refuse anything but a regular file that only this user may read or write."""
    if stat.S_ISLNK(found.st_mode):
        raise _Refused(_SYMLINK)
    if not stat.S_ISREG(found.st_mode):
        raise _Refused("it is not a regular file (a wfkit server writes a regular file there)")
    getuid = getattr(os, "getuid", None)
    if getuid is None:  # Windows: no owners or modes of this kind to check
        return
    if found.st_uid != getuid():
        raise _Refused(f"it is owned by uid {found.st_uid}, not by you (uid {getuid()})")
    mode = stat.S_IMODE(found.st_mode)
    if mode & 0o077:
        raise _Refused(
            f"other users may read or change it (mode {mode:04o}; a wfkit server writes it "
            "with mode 0600)"
        )


def _parse(text: str) -> ServerInfo:
    """The file's fields, each of the right type."""
    try:
        found: Any = json.loads(text)
    except ValueError:
        raise _Refused("it is not a server file wfkit wrote (it is not JSON)") from None
    if not isinstance(found, dict):
        raise _Refused("it is not a server file wfkit wrote (it is not a JSON object)")
    if not isinstance(found.get("server_id"), str) or not found["server_id"]:
        raise _Refused(
            "it names no server id, so its server cannot prove that it wrote it (a wfkit older "
            "than this one wrote it: restart that server with this version)"
        )
    url, pid = found.get("url"), found.get("pid")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise _Refused("it is not a server file wfkit wrote (its url is not an http:// URL)")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise _Refused("it is not a server file wfkit wrote (its pid is not a process id)")
    token, db = found.get("token"), found.get("db")
    if not isinstance(token, str) or not isinstance(db, str):
        raise _Refused("it is not a server file wfkit wrote (it lacks the token or the db)")
    return ServerInfo(url, pid, token, found["server_id"], db)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    except OSError:
        return False
    return True


def _unproven(info: ServerInfo, timeout: float) -> str | None:
    """Why the server at the file's URL is not shown to be the one that wrote it, or None.

    Only ``/health`` is asked, and without the token: nothing secret leaves before the proof.
    """
    probe = ApiClient(info.url, "", timeout=timeout)
    try:
        health = probe.health()
    except NoServer as exc:
        return f"it names process {info.pid} at {info.url}, but {exc}"
    except StoreError as exc:
        return f"{exc}, so it cannot show that it wrote the file"
    if health.get("server_id") != info.server_id:  # a public id: no constant-time compare needed
        return (
            f"the server at {info.url} is not the one that wrote it (it answers /health with "
            "another server id)"
        )
    return None
