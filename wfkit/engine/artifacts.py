"""Artifacts: results too large for the data document, stored through fsspec, referenced in it.

An activity returns ``wf.Artifact(value)`` (as its output, or as a value inside its output
dict, or puts one into a dict data document). After the attempt, on whichever process ran it,
the value is encoded (:mod:`wfkit.engine.artifact_codecs`) and written under the engine's
artifact root (:mod:`wfkit.engine.artifact_root`: a temporary name renamed when complete,
files 0600 and folders 0700 on a local root)::

    <root>/<run_id>/<node_id>/<attempt>[-<loop path>]-<sha256[:16]>[-<name>].<ext>

What the output and the data document hold instead is a reference, a small JSON dict (the
public contract, :class:`ArtifactRef`)::

    {"$artifact": "file:///.../run/node/1-0f3a....parquet", "size": 1234,
     "sha256": "0f3a...", "media_type": "application/vnd.apache.parquet",
     "format": "pandas", "name": null}

and the attempt's result carries the :class:`~wfkit.engine.artifact_records.ArtifactRecord`
of each, which the writer stores in ``wf_artifacts`` with the checkpoint that records the
attempt. ``ctx.load(ref)`` (or ``engine.load_artifact(ref)``, ``run.load(ref)``) loads only a
reference the engine issued (:func:`load_artifact`: under the root, recorded, matching its
record, and of a run the loader may read), reading at most the recorded size and checking the
recorded SHA-256 before decoding by the recorded format.

Files are written per attempt and content-addressed within it: a failed attempt removes the
files it created, and its references are never recorded; a run's artifacts live under
``<root>/<run_id>/`` and a purge removes that folder with the run's records.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import urlsplit

from wfkit.definition.values import MAX_DEPTH
from wfkit.engine.artifact_codecs import Encoded, decode, encode
from wfkit.engine.artifact_records import ArtifactRecord, Resolver, mismatch
from wfkit.engine.artifact_root import ArtifactRoot, refused
from wfkit.errors import ArtifactError, UsageError

__all__ = [
    "ARTIFACT_KEY",
    "Artifact",
    "ArtifactRef",
    "ArtifactStore",
    "AttemptArtifacts",
    "contains_artifact",
    "default_root",
    "is_artifact_ref",
    "load_artifact",
    "root_url",
]

log = logging.getLogger("wfkit.engine")

ARTIFACT_KEY = "$artifact"
"""The key that makes a JSON dict an artifact reference (its value is the artifact's URI)."""

ArtifactRef = TypedDict(
    "ArtifactRef",
    {
        "$artifact": str,  # the URI the content is stored at (under the engine's root)
        "size": int,  # bytes stored
        "sha256": str,  # hex SHA-256 of the bytes stored
        "media_type": str,  # e.g. application/vnd.apache.parquet
        "format": str,  # how load() decodes it: pandas, polars, numpy, bytes, text, file
        "name": str | None,  # the name given (a file's name for files), or None
    },
)
"""The reference an artifact leaves in the data document and in ``wf_outputs``."""


class Artifact:
    """A result too large for the data document, stored as a file under the artifact root.

    Return it from an activity (or put it in the output dict, or into a dict ``ctx.data``);
    the engine stores ``value`` after the attempt and records an :class:`ArtifactRef` instead.

    Parameters
    ----------
    value
        A pandas or polars DataFrame (stored as Parquet, needs pyarrow for pandas), a numpy
        array (``.npy``, no pickled objects), ``bytes``, ``str`` (UTF-8) or a
        ``pathlib.Path`` to a file (its content is copied in).
    media_type : str, optional
        Recorded in the reference; by default the format's (Parquet, ``application/x-npy``,
        ``application/octet-stream``, ``text/plain``; a file's from its name).
    name : str, optional
        A name kept in the reference and in the file name (a file's own name by default).

    Examples
    --------
    >>> import wfkit as wf
    >>> wf.Artifact(b"\\x00" * 10, name="zeros")
    Artifact(bytes, name='zeros')
    """

    __slots__ = ("media_type", "name", "value")

    def __init__(self, value: Any, media_type: str | None = None, name: str | None = None) -> None:
        self.value = value
        self.media_type = media_type
        self.name = name

    def __repr__(self) -> str:
        named = "" if self.name is None else f", name={self.name!r}"
        return f"Artifact({type(self.value).__name__}{named})"


def is_artifact_ref(value: Any) -> bool:
    """True when ``value`` is an artifact reference (a dict with a ``"$artifact"`` URI)."""
    return isinstance(value, dict) and isinstance(value.get(ARTIFACT_KEY), str)


def contains_artifact(value: Any) -> bool:
    """True when ``value`` is or holds (in dicts, lists, tuples) an :class:`Artifact`.

    Looks :data:`~wfkit.definition.values.MAX_DEPTH` levels down, no deeper (a value nested
    deeper cannot be stored anyway, and is refused as such), and never recurses.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Artifact):
            return True
        if depth > MAX_DEPTH:
            continue
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)
    return False


# --- roots ---------------------------------------------------------------------------------------


def root_url(root: str | Path) -> str:
    """The artifact root as a URL: fsspec URLs as given, local paths made absolute ``file://``
    (the path as it is, not percent-encoded: fsspec takes a ``file://`` URL's path literally)."""
    if isinstance(root, str) and "://" in root:
        return root.rstrip("/")
    return "file://" + Path(root).expanduser().resolve().as_posix()


def default_root(target: str) -> str:
    """Where an engine on ``target`` keeps artifacts unless told otherwise.

    A DuckDB file ``runs.duckdb`` keeps them in ``runs.duckdb.artifacts/`` next to it;
    ``":memory:"`` in a fresh folder under the temporary directory (created on first use);
    PostgreSQL in ``~/.local/share/wfkit/artifacts/<host>-<port>-<database>/`` (a local folder:
    engines on several hosts must share a root they all reach, given as ``artifacts=``).
    """
    if target == ":memory:":
        return root_url(Path(tempfile.gettempdir()) / f"wfkit-artifacts-{uuid.uuid4().hex[:12]}")
    if "://" in target:
        url = urlsplit(target)
        database = url.path.strip("/") or "postgres"
        where = f"{url.hostname or 'localhost'}-{url.port or 5432}-{database}"
        return root_url(Path.home() / ".local" / "share" / "wfkit" / "artifacts" / _safe(where))
    path = Path(target)
    return root_url(path.with_name(path.name + ".artifacts"))


def _safe(text: str, limit: int = 80) -> str:
    """``text`` as one path segment: letters and digits of any script, ``-``, ``_`` and ``.``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip(".")
    return safe[:limit] or "_"


# --- the store -----------------------------------------------------------------------------------


class ArtifactStore:
    """Artifacts under one root URL (a plain, picklable value: only the URL is kept)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self._parsed: ArtifactRoot | None = None

    def __repr__(self) -> str:
        return f"ArtifactStore({self.root!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.root, self._parsed = state["root"], None

    @property
    def parsed(self) -> ArtifactRoot:
        """The root, parsed (its filesystem is built on first use)."""
        if self._parsed is None:
            self._parsed = ArtifactRoot(self.root)
        return self._parsed

    def save(
        self,
        artifact: Artifact,
        run_id: str,
        node_id: str,
        stem: str,
        where: str = "artifact",
        created: list[str] | None = None,
        variant: int = 0,
    ) -> ArtifactRef:
        """Store ``artifact`` in the node's folder (file name ``<stem>-<hash>...``) and return
        its reference; the URI is appended to ``created`` when this call wrote the file (a file
        with this content there already is left as it is). ``variant`` tells apart two
        artifacts of one attempt that would share a name (``-2``, ``-3``...)."""
        encoded = encode(artifact.value, where)
        name = artifact.name
        if name is None and encoded.file is not None:
            name = encoded.file.name
        tail = "" if name is None else f"-{_safe(Path(name).stem if encoded.file else name)}"
        tail += f"-{variant}" if variant else ""

        def leaf(sha: str) -> str:
            return f"{stem}-{sha[:16]}{tail}{encoded.ext}"

        root = self.parsed
        try:
            folders = [_safe(run_id), _safe(node_id)]
            if root.walks:
                path, sha, size, made = root.write_local(folders, encoded.chunks(), leaf)
            else:
                path, sha, size, made = _write_remote(root, folders, encoded, leaf)
            uri = root.uri_of(path)
        except ArtifactError:
            raise
        except Exception as exc:
            raise ArtifactError(
                f"{where}: storing the artifact under {self.root} failed "
                f"({type(exc).__name__}: {exc}); check that the artifact root is reachable and "
                "writable from this process (nothing of this artifact was left there)"
            ) from exc
        if made and created is not None:
            created.append(uri)
        return {
            "$artifact": uri,
            "size": size,
            "sha256": sha,
            "media_type": artifact.media_type or encoded.media_type,
            "format": encoded.format,
            "name": name,
        }

    def delete(self, uris: Iterable[str]) -> None:
        """Remove these artifact files (best effort: failures are logged)."""
        root = self.parsed
        for uri in uris:
            try:
                path = root.path_of(uri)
                if root.walks:
                    root.remove_local(path)
                else:
                    root.fs.rm_file(path)
            except Exception as exc:
                log.warning("artifacts: removing %s failed (%s); it is left behind", uri, exc)

    def delete_runs(self, run_ids: Iterable[str]) -> int:
        """Remove the artifact folders of these runs; how many existed. Failures are logged
        and never raised: the runs' rows are gone already."""
        removed = 0
        ids = list(run_ids)
        if not ids:
            return 0
        try:
            fs, root = self.parsed.fs, self.parsed.path
        except Exception as exc:
            log.warning(
                "artifacts: the artifacts of %d purged runs were not removed from %s (%s)",
                len(ids),
                self.root,
                exc,
            )
            return 0
        for run_id in ids:
            path = f"{root}/{_safe(run_id)}"
            try:
                if fs.exists(path):
                    fs.rm(path, recursive=True)  # (shutil.rmtree locally: links are not followed)
                    removed += 1
            except Exception as exc:
                log.warning(
                    "artifacts: removing the artifacts of purged run %s under %s failed (%s); "
                    "they are left behind: delete the folder by hand",
                    run_id,
                    self.root,
                    exc,
                )
        return removed


def _write_remote(
    root: ArtifactRoot, folders: list[str], encoded: Encoded, leaf: Any
) -> tuple[str, str, int, bool]:
    """Write an artifact to a root that is not a local folder (one request per object: an
    object store never shows half an object); as :meth:`ArtifactRoot.write_local`."""
    fs = root.fs
    sha, size = encoded.digest()
    path = "/".join([root.path, *folders, leaf(sha)])
    # content-addressed: an object of this name and size holds these bytes (a changed one is
    # found when it is loaded: its hash differs from the record)
    if fs.exists(path) and fs.size(path) == size:
        return path, sha, size, False
    fs.makedirs(fs._parent(path), exist_ok=True)
    try:
        if encoded.data is not None:
            fs.pipe_file(path, encoded.data)
        else:
            fs.put_file(str(encoded.file), path)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm_file(path)
        raise
    return path, sha, size, True


# --- loading -------------------------------------------------------------------------------------


def load_artifact(
    ref: Any, root: str | ArtifactRoot | None, issued: Resolver, run_id: str | None = None
) -> Any:
    """The value an artifact reference stands for, when this engine issued it to a run that
    ``run_id`` may read (any run when None).

    In order: ``ref`` must be a reference; its URI must lie under ``root``
    (:meth:`ArtifactRoot.path_of`, no filesystem touched); ``issued`` must hold its record and
    let ``run_id`` load it; every field of ``ref`` must match the record. Only then is the file
    read — at most its recorded size, hashed as it is read — and decoded by the recorded format.
    DataFrames come back as DataFrames of the library that stored them, arrays as numpy
    arrays, bytes as bytes, text as str, and a file as a local ``pathlib.Path`` (the stored
    file itself on a local root; a checked copy in a folder of this user's under the temporary
    directory otherwise).

    Raises
    ------
    UsageError
        ``ref`` is not an artifact reference.
    ArtifactError
        The reference was refused (not under the root, not issued, not this run's to load, not
        matching its record), or the artifact is missing or was changed since it was stored.
        The message names the reference, never anything about a path outside the root.
    """
    if not is_artifact_ref(ref):
        shown = repr(ref)
        raise UsageError(
            f"load() takes an artifact reference (a dict with a {ARTIFACT_KEY!r} URI, as an "
            f"activity that returned wf.Artifact recorded it), not {shown[:120]}"
        )
    uri: str = ref[ARTIFACT_KEY]
    if root is None:
        raise refused(
            uri, "this process has no artifact root", "load it where the engine runs its attempts"
        )
    parsed = root if isinstance(root, ArtifactRoot) else ArtifactRoot(root)
    path = parsed.path_of(uri)
    record = issued.resolve(uri, run_id)
    if record.uri != uri or not record.matches(ref):
        raise mismatch(uri)
    if record.format == "file" and parsed.local:
        parsed.read(path, uri, record.size, record.sha256, keep=False)
        return Path(path)
    data = parsed.read(path, uri, record.size, record.sha256)
    if record.format == "file":
        return _local_copy(data, record, path)
    return decode(record.format, data, uri)


def _local_copy(data: bytes, record: ArtifactRecord, path: str) -> Path:
    """A file artifact of a remote root as a local file: ``<tmp>/wfkit-artifacts-<uid>/
    <sha256>/<name>``, in a folder only this user may enter (checked, not assumed: the
    temporary directory is shared)."""
    base = Path(tempfile.gettempdir()) / f"wfkit-artifacts-{_uid()}"
    folder = base / _safe(record.sha256, 64)
    for step in (base, folder):
        with contextlib.suppress(FileExistsError):
            step.mkdir(mode=0o700)
        info = os.lstat(step)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != _uid() or info.st_mode & 0o077:
            raise ArtifactError(
                f"artifact {record.uri!r} cannot be copied to {step}: that folder is not "
                "private to this user (another user made it, or it is a link); remove it"
            )
    target = folder / _safe(record.name or Path(path).name, 200)
    with contextlib.suppress(OSError):
        held = os.lstat(target)
        if stat.S_ISREG(held.st_mode) and held.st_size == len(data):
            return target
    partial = folder / f".{uuid.uuid4().hex}.part"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return target


def _uid() -> int:
    getuid = getattr(os, "getuid", None)
    return getuid() if getuid is not None else 0


# --- one attempt ---------------------------------------------------------------------------------


class AttemptArtifacts:
    """The artifacts of one attempt: stores the :class:`Artifact` values of its output and
    data document, keeps their records for the writer, and removes the files it created when
    the attempt fails after all."""

    def __init__(
        self,
        root: str | None,
        run_id: str,
        node_id: str,
        attempt: int,
        loop_path: tuple[int, ...],
        activity: str,
        undo: bool = False,
    ) -> None:
        self.root = root
        self.run_id = run_id
        self.node_id = node_id
        self.attempt = attempt
        self.activity = activity
        cell = "" if not loop_path else "-" + ".".join(map(str, loop_path))
        self.stem = f"{'undo-' if undo else ''}{attempt}{cell}"
        self.created: list[str] = []
        self._done: dict[int, ArtifactRef] = {}  # id(Artifact) -> its reference
        self._records: dict[str, ArtifactRecord] = {}  # uri -> its record
        self._store: ArtifactStore | None = None

    def records(self) -> tuple[ArtifactRecord, ...]:
        """The records of the artifacts this attempt stored, one per URI."""
        return tuple(self._records.values()) if self._records else ()

    def replace(self, value: Any, where: str) -> Any:
        """``value`` with every :class:`Artifact` in it stored and replaced by its reference
        (containers holding none are returned as they are)."""
        if isinstance(value, Artifact):
            return self._save(value, where)
        if isinstance(value, dict):
            if not any(contains_artifact(v) for v in value.values()):
                return value
            return {k: self.replace(v, _at(where, k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            if not any(contains_artifact(v) for v in value):
                return value
            return [self.replace(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    def _save(self, artifact: Artifact, where: str) -> ArtifactRef:
        done = self._done.get(id(artifact))
        if done is not None:
            return done
        if self.root is None:
            raise ArtifactError(
                f"activity {self.activity!r} returned a wf.Artifact ({where}) but this attempt "
                "has no artifact root; attempts the engine runs always have one"
            )
        if self._store is None:
            self._store = ArtifactStore(self.root)
        variant = 0
        while True:  # two artifacts of this attempt that would share a file name get their own
            ref = self._store.save(
                artifact,
                self.run_id,
                self.node_id,
                self.stem,
                f"activity {self.activity!r}, {where}",
                self.created,
                variant,
            )
            record = ArtifactRecord.of(ref, self.run_id, self.node_id, self.attempt)
            if self._records.setdefault(record.uri, record) == record:
                break
            variant = max(variant, 1) + 1
        self._done[id(artifact)] = ref
        return ref

    def discard(self) -> None:
        """Remove the files this attempt created (it failed: nothing refers to them)."""
        if self.created and self.root is not None:
            ArtifactStore(self.root).delete(self.created)
            self.created.clear()
        self._records.clear()


def _at(where: str, key: Any) -> str:
    return f"{where}.{key}" if isinstance(key, str) and key.isidentifier() else f"{where}[{key!r}]"
