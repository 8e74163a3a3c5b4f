"""The artifact root: which URIs lie under it, and reading and writing its files safely.

An engine keeps its artifacts under one root URL (``wf.Engine(artifacts=...)``); everything it
reads or writes there goes through :class:`ArtifactRoot`.

**Containment.** A URI lies under the root when it uses the root's protocol (and, for a chained
root such as ``simplecache::s3://...``, the same chain; no chain otherwise), is written the way
the engine writes it (the root filesystem's ``unstrip_protocol`` of its path), and its path is
already normal (no ``..``, ``.`` or ``//``) and is ``<root path>/<run>/<node>/<file>``: three
segments of letters and digits of any script, ``-``, ``_`` and ``.``, none starting with a dot —
exactly the names the engine gives its files. Only the root's own filesystem class parses the
URI, as string work: a reference that names ``ftp://`` or ``http://`` never reaches a
filesystem that would open a connection.

**Local roots** are walked one folder at a time from the root, each opened with ``O_NOFOLLOW``:
a symbolic link anywhere below the root (planted in place of a run's folder or of a file) is
refused, never followed, so nothing outside the root is opened, whatever a link points to. A
file is opened non-blocking (a FIFO cannot hang the open) and must be a regular file of the
recorded size (``fstat``) before a byte is read. On a system without ``openat`` the path is
resolved (``os.path.realpath``) and must still lie under the root.

**Bounded reads.** At most the recorded size is read, in chunks of 1 MiB, hashed as it goes; a
file that is shorter, longer or hashes differently was changed since it was stored. Remote
roots ask ``fs.info`` for the size first and read at most that many bytes.

**Writes** go to a hidden temporary name in the node's folder (``.<file>.<random>.part``, mode
0600 whatever the umask), are flushed and renamed into place; a failure (a full disk) removes
the temporary file and the folders the write created (mode 0700). Remote roots (object stores)
write the object in one request, and a failed write removes what may be left.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import posixpath
import stat
import uuid
from collections.abc import Generator, Iterable
from typing import Any

from wfkit.definition.values import printable
from wfkit.errors import ArtifactError

__all__ = [
    "CHUNK",
    "MAX_URI",
    "ArtifactRoot",
    "changed",
    "clean_segment",
    "missing",
    "refused",
    "shown",
]

CHUNK = 1 << 20
"""Bytes read or written at a time."""

SEGMENTS = 3  # <run>/<node>/<file> below the root
MAX_URI = 4096  # a longer "URI" is refused before any parsing
SHOWN = 200  # characters of a refused URI that a message repeats

EXTRA = "pip install 'wfkit[artifacts]'"

_WALK = (
    os.open in os.supports_dir_fd
    and os.mkdir in os.supports_dir_fd
    and hasattr(os, "O_NOFOLLOW")
    and hasattr(os, "O_DIRECTORY")
)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def shown(uri: Any) -> str:
    """A reference's URI as a message repeats it: printable, at most 200 characters."""
    text = uri if isinstance(uri, str) else repr(uri)
    text = printable(text)
    return repr(text if len(text) <= SHOWN else text[:SHOWN] + "...")


def refused(uri: Any, why: str, then: str) -> ArtifactError:
    """The error of a reference that is not loaded: it names the reference and says why in
    terms of the reference only (never what lies at a path outside the root)."""
    return ArtifactError(f"artifact reference {shown(uri)} was refused: {why}; {then}")


def clean_segment(text: str) -> bool:
    """True for a name the engine gives a folder or file under the root."""
    return (
        bool(text)
        and not text.startswith(".")
        and all(c.isalnum() or c in "-_." for c in text)
        and text not in (".", "..")
    )


def _fsspec() -> Any:
    try:
        return importlib.import_module("fsspec")
    except ImportError as exc:
        raise ArtifactError(
            f"artifacts are stored through fsspec, which is not installed ({exc}): {EXTRA}"
        ) from None


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return tuple(protocol) if isinstance(protocol, tuple | list) else (protocol,)


class ArtifactRoot:
    """The engine's artifact root, parsed once (its filesystem is built on first use).

    Parameters
    ----------
    url : str
        The root as :func:`wfkit.engine.artifacts.root_url` gives it.
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        chain, _, last = self.url.rpartition("::")
        self.chain = chain  # "" for a root that is not chained
        self.scheme = last.partition("://")[0] if "://" in last else ""
        self._fs: Any = None
        self._path = ""

    def __repr__(self) -> str:
        return f"ArtifactRoot({self.url!r})"

    @property
    def fs(self) -> Any:
        """The root's fsspec filesystem."""
        if self._fs is None:
            fs, path = _fsspec().core.url_to_fs(self.url)
            self._fs, self._path = fs, path.rstrip("/")
        return self._fs

    @property
    def path(self) -> str:
        """The root's path as its filesystem names it."""
        _ = self.fs
        return self._path

    @property
    def local(self) -> bool:
        """True for a root on this machine's file system."""
        names = _protocols(self.fs)
        return not self.chain and ("file" in names or "local" in names)

    @property
    def walks(self) -> bool:
        """True when files are reached one folder at a time from the root without following
        links (local roots on systems with ``openat``)."""
        return _WALK and self.local

    # --- containment ----------------------------------------------------------------------------

    def path_of(self, uri: Any) -> str:
        """The path ``uri`` names under the root; ``ArtifactError`` (refused) for any URI that
        does not lie strictly under it in the form the engine writes."""
        if not isinstance(uri, str) or not uri or len(uri) > MAX_URI or "\x00" in uri:
            raise refused(uri, "its URI is not one this engine writes", _THEN_ISSUED)
        last = uri
        if self.chain:
            if not uri.startswith(self.chain + "::"):
                raise self._outside(uri)
            last = uri[len(self.chain) + 2 :]
        if "::" in last:
            raise refused(uri, "it chains protocols, which the artifact root does not", _THEN_ROOT)
        scheme, sep, _ = last.partition("://")
        if not sep or scheme != self.scheme:
            raise refused(
                uri,
                f"it uses another protocol than the artifact root ({self.scheme}://)",
                _THEN_ROOT,
            )
        try:
            path = self.fs._strip_protocol(last)
        except Exception:  # whatever the root's filesystem makes of it, it is not ours
            raise self._outside(uri) from None
        if (
            not isinstance(path, str)
            or posixpath.normpath(path) != path
            or not path.startswith(self.path + "/")
            or self.fs.unstrip_protocol(path) != last
        ):
            raise self._outside(uri)
        parts = path[len(self.path) + 1 :].split("/")
        if len(parts) != SEGMENTS or not all(clean_segment(p) for p in parts):
            raise self._outside(uri)
        return path

    def uri_of(self, path: str) -> str:
        """The URI the engine writes in a reference for ``path`` under the root (a chained
        root's chain first)."""
        uri: str = self.fs.unstrip_protocol(path)
        return f"{self.chain}::{uri}" if self.chain else uri

    def _outside(self, uri: str) -> ArtifactError:
        return refused(
            uri, f"it does not lie under this engine's artifact root {self.url}", _THEN_ROOT
        )

    def segments(self, path: str) -> list[str]:
        """The folders and file below the root of a path :meth:`path_of` gave."""
        return path[len(self.path) + 1 :].split("/")

    # --- reading --------------------------------------------------------------------------------

    def read(self, path: str, uri: str, size: int, sha256: str, keep: bool = True) -> bytes:
        """The ``size`` bytes at ``path`` once their SHA-256 is ``sha256`` (only checked, and
        ``b""`` returned, when not ``keep``); ``ArtifactError`` when the file is missing, is not
        a regular file of that size, or hashes differently."""
        if self.local:
            chunks = self._local_chunks(path, uri, size)
        else:
            chunks = self._remote_chunks(path, uri, size)
        digest, kept, got = hashlib.sha256(), bytearray(), 0
        with contextlib.closing(chunks):
            for chunk in chunks:
                digest.update(chunk)
                got += len(chunk)
                if keep:
                    kept += chunk
        if got != size or digest.hexdigest() != sha256:
            raise changed(uri)
        return bytes(kept)

    def _local_chunks(self, path: str, uri: str, size: int) -> Generator[bytes, None, None]:
        fd = self._open_local(path, uri)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise changed(uri, "it is no longer a regular file")
            if info.st_size != size:
                raise changed(uri)
            left = size
            while left > 0:
                chunk = os.read(fd, min(CHUNK, left))
                if not chunk:
                    break
                left -= len(chunk)
                yield chunk
        finally:
            os.close(fd)

    def _open_local(self, path: str, uri: str) -> int:
        flags = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _NOCTTY | _CLOEXEC
        try:
            if not _WALK:
                real = os.path.realpath(path)
                if not real.startswith(os.path.realpath(self.path) + os.sep):
                    raise changed(uri, "a symbolic link under the root points elsewhere")
                return os.open(real, flags)
            folder = self._open_folders(self.segments(path)[:-1], create=None)
            try:
                return os.open(self.segments(path)[-1], flags, dir_fd=folder)
            finally:
                os.close(folder)
        except FileNotFoundError:
            raise missing(uri) from None
        except ArtifactError:
            raise
        except OSError as exc:  # ELOOP: a symbolic link where the engine wrote a file or folder
            why = f"it cannot be opened as the engine wrote it ({exc.strerror})"
            raise changed(uri, why) from None

    def _remote_chunks(self, path: str, uri: str, size: int) -> Generator[bytes, None, None]:
        fs = self.fs
        try:
            info = fs.info(path)
            if info.get("type") != "file":
                raise changed(uri, "it is no longer a file")
            if info.get("size") != size:
                raise changed(uri)
            with fs.open(path, "rb") as handle:
                left = size
                while left > 0:
                    chunk = handle.read(min(CHUNK, left))
                    if not chunk:
                        break
                    left -= len(chunk)
                    yield chunk
        except FileNotFoundError:
            raise missing(uri) from None
        except ArtifactError:
            raise
        except Exception as exc:
            raise ArtifactError(
                f"artifact {shown(uri)} could not be read ({type(exc).__name__}: {exc}); check "
                "that the artifact root is reachable from this process"
            ) from exc

    def _open_folders(self, names: list[str], create: list[tuple[int, str]] | None) -> int:
        """An open descriptor of the folder ``names`` below the root, walked without following
        symbolic links; with ``create``, missing folders are made (0700) and listed there as
        (descriptor of their parent, name), parents first, for :meth:`_unmake`."""
        fd = os.open(self.path, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        try:
            for name in names:
                made = False
                if create is not None:
                    try:
                        os.mkdir(name, 0o700, dir_fd=fd)
                        create.append((os.dup(fd), name))
                        made = True
                    except FileExistsError:
                        pass
                inner = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = inner
                if made:
                    os.fchmod(fd, 0o700)  # whatever the umask
        except BaseException:
            os.close(fd)
            raise
        return fd

    # --- writing --------------------------------------------------------------------------------

    def ensure(self) -> None:
        """Create a local root that does not exist yet, owner-only (0700 whatever the umask;
        a root that exists keeps its permissions)."""
        if self.local and not os.path.isdir(self.path):
            parent = os.path.dirname(self.path)
            os.makedirs(parent, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.path, 0o700)
                os.chmod(self.path, 0o700)

    def write_local(
        self, folders: list[str], chunks: Iterable[bytes], name_of: Any
    ) -> tuple[str, str, int, bool]:
        """Write ``chunks`` into the folder ``folders`` below the root, under the name
        ``name_of(sha256)`` picks once the content is hashed: (path, sha256, size, created).
        ``created`` is False when that file existed already with this content (content-
        addressed: it is left as it was). Nothing is left behind when anything fails."""
        self.ensure()
        made: list[tuple[int, str]] = []
        folder = -1
        temporary = ""
        try:
            folder = self._open_folders(folders, made)
            temporary = f".{uuid.uuid4().hex}.part"
            sha, size = _write_new(folder, temporary, chunks)
            leaf = name_of(sha)
            if _holds(folder, leaf, size, sha):
                os.unlink(temporary, dir_fd=folder)
                created = False
            else:
                os.replace(temporary, leaf, src_dir_fd=folder, dst_dir_fd=folder)
                created = True
            temporary = ""
            with contextlib.suppress(OSError):
                os.fsync(folder)  # the new name is durable before a reference names it
            return "/".join([self.path, *folders, leaf]), sha, size, created
        except BaseException:
            if temporary and folder >= 0:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=folder)
            _unmake(made)
            made = []
            raise
        finally:
            if folder >= 0:
                os.close(folder)
            for parent, _ in made:
                os.close(parent)

    def remove_local(self, path: str) -> None:
        """Remove the file at ``path`` (below the root) without following links."""
        names = self.segments(path)
        folder = self._open_folders(names[:-1], None)
        try:
            os.unlink(names[-1], dir_fd=folder)
        finally:
            os.close(folder)


def _write_new(folder: int, name: str, chunks: Iterable[bytes]) -> tuple[str, int]:
    """Write a new file ``name`` in ``folder`` (0600); its sha256 and size."""
    fd = os.open(
        name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600, dir_fd=folder
    )
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        digest, size = hashlib.sha256(), 0
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
            view = memoryview(chunk)
            while view:
                written = os.write(fd, view[:CHUNK])
                view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    return digest.hexdigest(), size


def _holds(folder: int, name: str, size: int, sha: str) -> bool:
    """True when ``folder`` holds a regular file ``name`` with exactly this content."""
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=folder)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != size:
            return False
        digest, left = hashlib.sha256(), size
        while left > 0:
            chunk = os.read(fd, min(CHUNK, left))
            if not chunk:
                return False
            digest.update(chunk)
            left -= len(chunk)
        return digest.hexdigest() == sha
    finally:
        os.close(fd)


def _unmake(made: list[tuple[int, str]]) -> None:
    """Remove the folders a failed write created (innermost first), and close their parents."""
    for parent, name in reversed(made):
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=parent)
        os.close(parent)


def changed(uri: str, why: str = "its content no longer matches what was stored") -> ArtifactError:
    """The error of an artifact this engine stored whose file was changed since."""
    return ArtifactError(
        f"artifact {shown(uri)} was changed since it was stored ({why}); re-run the step that "
        "made it, and find out what else writes to the artifact root"
    )


def missing(uri: str) -> ArtifactError:
    """The error of an artifact this engine stored whose file is gone."""
    return ArtifactError(
        f"artifact {shown(uri)} is missing: it was deleted (a purge removes the artifacts of the "
        "runs it purges) or its root is not reachable from this process (memory:// roots live in "
        "one process only; give the engine a root every process shares)"
    )


_THEN_ROOT = (
    "only artifacts this engine stored under its root load: load the reference a step of this "
    "run recorded (in ctx.outputs or ctx.data), or open the engine with the root it was stored "
    "under (wf.Engine(..., artifacts=...))"
)
_THEN_ISSUED = (
    "only references that steps recorded when they returned wf.Artifact load: pass the "
    "reference as the step recorded it"
)
