"""Artifacts: results too large for the data document, stored through fsspec, referenced in it.

An activity returns ``wf.Artifact(value)`` (as its output, or as a value inside its output
dict, or puts one into a dict data document). After the attempt, on whichever process ran it,
the value is encoded (Parquet for pandas and polars DataFrames, ``.npy`` for numpy arrays, the
bytes themselves for ``bytes``, UTF-8 for ``str``, a file's content for a ``pathlib.Path``) and
written under the engine's artifact root::

    <root>/<run_id>/<node_id>/<attempt>[-<loop path>]-<sha256[:16]>[-<name>].<ext>

What the output and the data document hold instead is a reference, a small JSON dict (the
public contract, :class:`ArtifactRef`)::

    {"$artifact": "file:///.../run/node/1-0f3a....parquet", "size": 1234,
     "sha256": "0f3a...", "media_type": "application/vnd.apache.parquet",
     "format": "pandas", "name": null}

``ctx.load(ref)`` (or ``engine.load_artifact(ref)``, ``run.load(ref)``) reads the file back,
checks its size and SHA-256 and decodes it by ``format``. Only plain values travel with a job
(the root is a URL string), so an attempt on another process (a Dask worker) stores and loads
artifacts the same way, provided the root is one that process reaches.

Files are written per attempt and content-addressed within it: a failed attempt removes the
files it created, so no recorded reference points at the file of a failed attempt; a run's
artifacts live under ``<root>/<run_id>/`` and a purge removes that folder.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import logging
import mimetypes
import sys
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import Any, TypedDict
from urllib.parse import urlsplit

from wfkit.definition.values import MAX_DEPTH
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

EXTRA = "pip install 'wfkit[artifacts]'"

PARQUET = "application/vnd.apache.parquet"
NPY = "application/x-npy"
OCTETS = "application/octet-stream"
TEXT = "text/plain; charset=utf-8"

ArtifactRef = TypedDict(
    "ArtifactRef",
    {
        "$artifact": str,  # the URI the content is stored at (any fsspec URL)
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
    """The artifact root as a URL: fsspec URLs as given, local paths made absolute ``file://``."""
    if isinstance(root, str) and "://" in root:
        return root.rstrip("/")
    return Path(root).expanduser().resolve().as_uri()


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


def _fsspec() -> Any:
    try:
        fsspec = importlib.import_module("fsspec")
    except ImportError as exc:
        raise ArtifactError(
            f"artifacts are stored through fsspec, which is not installed ({exc}): {EXTRA}"
        ) from None
    return fsspec


def _fs(url: str) -> tuple[Any, str]:
    fs, path = _fsspec().core.url_to_fs(url)
    return fs, path


def _safe(text: str, limit: int = 80) -> str:
    """``text`` as one path segment: letters and digits of any script, ``-``, ``_`` and ``.``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip(".")
    return safe[:limit] or "_"


# --- encoding ------------------------------------------------------------------------------------


class _Encoded:
    """An artifact's bytes (or the local file holding them) and what describes them."""

    def __init__(
        self, fmt: str, media_type: str, ext: str, data: bytes | None, file: Path | None = None
    ) -> None:
        self.format = fmt
        self.media_type = media_type
        self.ext = ext
        self.data = data
        self.file = file

    def digest(self) -> tuple[str, int]:
        if self.data is not None:
            return hashlib.sha256(self.data).hexdigest(), len(self.data)
        assert self.file is not None
        with self.file.open("rb") as handle:
            return _sha256(handle)


def _module(value: Any) -> str:
    return type(value).__module__.split(".")[0]


def _parquet_problem(exc: ImportError) -> ArtifactError:
    return ArtifactError(f"storing a DataFrame as Parquet needs pyarrow ({exc}): {EXTRA}")


def _encode(artifact: Artifact, where: str) -> _Encoded:
    value = artifact.value
    if isinstance(value, bytes | bytearray | memoryview):
        return _Encoded("bytes", OCTETS, ".bin", bytes(value))
    if isinstance(value, str):
        return _Encoded("text", TEXT, ".txt", value.encode("utf-8", "surrogatepass"))
    if isinstance(value, PurePath):
        path = Path(value)
        if not path.is_file():
            raise ArtifactError(
                f"{where}: wf.Artifact({str(path)!r}) names no file this process can read; an "
                "artifact path must be an existing file (write it first, then return its path)"
            )
        guessed = mimetypes.guess_type(path.name)[0] or OCTETS
        return _Encoded("file", guessed, path.suffix, None, path)
    module = _module(value)
    if module == "pandas" and hasattr(value, "to_parquet"):
        buffer = io.BytesIO()
        try:
            value.to_parquet(buffer)
        except ImportError as exc:
            raise _parquet_problem(exc) from None
        return _Encoded("pandas", PARQUET, ".parquet", buffer.getvalue())
    if module == "polars" and hasattr(value, "write_parquet"):
        buffer = io.BytesIO()
        value.write_parquet(buffer)
        return _Encoded("polars", PARQUET, ".parquet", buffer.getvalue())
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        buffer = io.BytesIO()
        try:
            numpy.save(buffer, value, allow_pickle=False)
        except ValueError as exc:
            raise ArtifactError(
                f"{where}: a numpy array of objects cannot be stored ({exc}); store arrays of "
                "numbers, or convert it (a DataFrame, bytes)"
            ) from None
        return _Encoded("numpy", NPY, ".npy", buffer.getvalue())
    raise ArtifactError(
        f"{where}: wf.Artifact holds a {type(value).__module__}.{type(value).__qualname__}, which "
        "it cannot store; give it a pandas or polars DataFrame, a numpy array, bytes, str or a "
        "pathlib.Path to a file (serialise other objects to bytes or a file first)"
    )


def _decode(fmt: str, data: bytes, uri: str) -> Any:
    if fmt == "bytes":
        return data
    if fmt == "text":
        return data.decode("utf-8", "surrogatepass")
    if fmt == "numpy":
        numpy = importlib.import_module("numpy")
        return numpy.load(io.BytesIO(data), allow_pickle=False)
    if fmt == "pandas":
        pandas = importlib.import_module("pandas")
        try:
            return pandas.read_parquet(io.BytesIO(data))
        except ImportError as exc:
            raise _parquet_problem(exc) from None
    if fmt == "polars":
        polars = importlib.import_module("polars")
        return polars.read_parquet(io.BytesIO(data))
    raise ArtifactError(
        f"artifact {uri} has format {fmt!r}, which this wfkit version cannot read; open it with "
        "the wfkit version that wrote it"
    )


# --- the store -----------------------------------------------------------------------------------


class ArtifactStore:
    """Artifacts under one root URL (a plain, picklable value: only the URL is kept)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    def __repr__(self) -> str:
        return f"ArtifactStore({self.root!r})"

    def folder(self, run_id: str, node_id: str | None = None) -> str:
        """The URL of a run's (or one of its nodes') folder."""
        url = f"{self.root}/{_safe(run_id)}"
        return url if node_id is None else f"{url}/{_safe(node_id)}"

    def save(
        self,
        artifact: Artifact,
        run_id: str,
        node_id: str,
        stem: str,
        where: str = "artifact",
        created: list[str] | None = None,
    ) -> ArtifactRef:
        """Store ``artifact`` in the node's folder (file name ``<stem>-<hash>...``) and return
        its reference; the URI is appended to ``created`` when this call wrote the file."""
        encoded = _encode(artifact, where)
        name = artifact.name
        if name is None and encoded.file is not None:
            name = encoded.file.name
        sha, size = encoded.digest()
        leaf = f"{stem}-{sha[:16]}"
        if name is not None:
            leaf += f"-{_safe(Path(name).stem if encoded.file else name)}"
        leaf += encoded.ext if encoded.ext.isascii() else ".bin"
        uri = f"{self.folder(run_id, node_id)}/{leaf}"
        try:
            fs, path = _fs(uri)
            # content-addressed: an existing file of the right size holds the same bytes (a
            # shorter one is what a process that died while writing left: written again)
            if not fs.exists(path) or fs.size(path) != size:
                fs.makedirs(fs._parent(path), exist_ok=True)
                if encoded.data is not None:
                    fs.pipe_file(path, encoded.data)
                else:
                    fs.put_file(str(encoded.file), path)
                if created is not None:
                    created.append(uri)
        except ArtifactError:
            raise
        except Exception as exc:
            raise ArtifactError(
                f"{where}: storing the artifact at {uri} failed ({type(exc).__name__}: {exc}); "
                "check that the artifact root is reachable and writable from this process"
            ) from exc
        return {
            "$artifact": fs.unstrip_protocol(path),
            "size": size,
            "sha256": sha,
            "media_type": artifact.media_type or encoded.media_type,
            "format": encoded.format,
            "name": name,
        }

    def delete(self, uris: Iterable[str]) -> None:
        """Remove these artifact files (best effort: failures are logged)."""
        for uri in uris:
            try:
                fs, path = _fs(uri)
                fs.rm_file(path)
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
            fs, root = _fs(self.root)
        except Exception as exc:
            log.warning(
                "artifacts: the artifacts of %d purged runs were not removed from %s (%s)",
                len(ids),
                self.root,
                exc,
            )
            return 0
        for run_id in ids:
            path = f"{root.rstrip('/')}/{_safe(run_id)}"
            try:
                if fs.exists(path):
                    fs.rm(path, recursive=True)
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


def load_artifact(ref: Any) -> Any:
    """The value an artifact reference stands for, after checking its size and SHA-256.

    DataFrames come back as DataFrames of the library that stored them, arrays as numpy
    arrays, bytes as bytes, text as str, and a file as a local ``pathlib.Path`` (the stored
    file itself on a local root; a checked copy in the temporary directory otherwise).

    Raises
    ------
    UsageError
        ``ref`` is not an artifact reference.
    ArtifactError
        The artifact is missing, or its content does not match the reference.
    """
    if not is_artifact_ref(ref):
        shown = repr(ref)
        raise UsageError(
            f"load() takes an artifact reference (a dict with a {ARTIFACT_KEY!r} URI, as an "
            f"activity that returned wf.Artifact recorded it), not {shown[:120]}"
        )
    uri: str = ref[ARTIFACT_KEY]
    fmt = str(ref.get("format", "bytes"))
    fs, path = _fs(uri)
    if fmt == "file" and _is_local(fs):
        _check(uri, ref, *_digest_file(fs, path, uri))
        return Path(path)
    data = _read(fs, path, uri)
    _check(uri, ref, hashlib.sha256(data).hexdigest(), len(data))
    if fmt == "file":
        copy = Path(tempfile.gettempdir()) / "wfkit-artifacts" / str(ref["sha256"])
        copy.mkdir(parents=True, exist_ok=True)
        target = copy / _safe(str(ref.get("name") or Path(path).name), 200)
        if not target.exists():
            partial = target.with_name(target.name + f".{uuid.uuid4().hex[:8]}.part")
            partial.write_bytes(data)
            partial.replace(target)
        return target
    return _decode(fmt, data, uri)


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol
    names = protocol if isinstance(protocol, tuple | list) else (protocol,)
    return "file" in names or "local" in names


def _read(fs: Any, path: str, uri: str) -> bytes:
    try:
        data: bytes = fs.cat_file(path)
    except FileNotFoundError:
        raise _missing(uri) from None
    except Exception as exc:
        raise ArtifactError(
            f"artifact {uri} could not be read ({type(exc).__name__}: {exc}); check that the "
            "artifact root is reachable from this process"
        ) from exc
    return data


def _digest_file(fs: Any, path: str, uri: str) -> tuple[str, int]:
    try:
        with fs.open(path, "rb") as handle:
            return _sha256(handle)
    except FileNotFoundError:
        raise _missing(uri) from None


def _sha256(handle: Any) -> tuple[str, int]:
    """The sha256 and size of what ``handle`` reads, in chunks of 1 MiB."""
    sha, size = hashlib.sha256(), 0
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        sha.update(chunk)
        size += len(chunk)
    return sha.hexdigest(), size


def _missing(uri: str) -> ArtifactError:
    return ArtifactError(
        f"artifact {uri} is missing: it was deleted (a purge removes the artifacts of the runs "
        "it purges) or its root is not reachable from this process (memory:// roots live in "
        "one process only; give the engine a root every process shares)"
    )


def _check(uri: str, ref: Any, sha: str, size: int) -> None:
    if sha != ref.get("sha256") or size != ref.get("size"):
        raise ArtifactError(
            f"artifact {uri} is corrupted: it holds {size:,} bytes with SHA-256 {sha[:16]}..., "
            f"the reference says {ref.get('size')!r} bytes with {str(ref.get('sha256'))[:16]}...; "
            "the file was changed after it was stored: re-run the step that made it"
        )


# --- one attempt ---------------------------------------------------------------------------------


class AttemptArtifacts:
    """The artifacts of one attempt: stores the :class:`Artifact` values of its output and
    data document, and removes the files it created when the attempt fails after all."""

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
        self.activity = activity
        cell = "" if not loop_path else "-" + ".".join(map(str, loop_path))
        self.stem = f"{'undo-' if undo else ''}{attempt}{cell}"
        self.created: list[str] = []
        self._done: dict[int, ArtifactRef] = {}  # id(Artifact) -> its reference

    def replace(self, value: Any, where: str) -> Any:
        """``value`` with every :class:`Artifact` in it stored and replaced by its reference
        (containers holding none are returned as they are)."""
        if isinstance(value, Artifact):
            return self._store(value, where)
        if isinstance(value, dict):
            if not any(contains_artifact(v) for v in value.values()):
                return value
            return {k: self.replace(v, _at(where, k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            if not any(contains_artifact(v) for v in value):
                return value
            return [self.replace(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    def _store(self, artifact: Artifact, where: str) -> ArtifactRef:
        done = self._done.get(id(artifact))
        if done is not None:
            return done
        if self.root is None:
            raise ArtifactError(
                f"activity {self.activity!r} returned a wf.Artifact ({where}) but this attempt "
                "has no artifact root; attempts the engine runs always have one"
            )
        store = ArtifactStore(self.root)
        ref = store.save(
            artifact,
            self.run_id,
            self.node_id,
            self.stem,
            f"activity {self.activity!r}, {where}",
            self.created,
        )
        self._done[id(artifact)] = ref
        return ref

    def discard(self) -> None:
        """Remove the files this attempt created (it failed: nothing refers to them)."""
        if self.created and self.root is not None:
            ArtifactStore(self.root).delete(self.created)
            self.created.clear()


def _at(where: str, key: Any) -> str:
    return f"{where}.{key}" if isinstance(key, str) and key.isidentifier() else f"{where}[{key!r}]"
