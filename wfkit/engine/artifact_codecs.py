"""How an artifact's value becomes bytes and back, by format.

Parquet for pandas and polars DataFrames, ``.npy`` for numpy arrays (never pickled objects),
the bytes themselves for ``bytes``, UTF-8 for ``str``, and a file's content for a
``pathlib.Path``. The format is recorded with the artifact; loading decodes by the recorded
format, never by what a reference claims.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import mimetypes
import sys
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import Any

from wfkit.engine.artifact_root import CHUNK, EXTRA, clean_segment, shown
from wfkit.errors import ArtifactError

__all__ = ["FORMATS", "Encoded", "decode", "encode"]

PARQUET = "application/vnd.apache.parquet"
NPY = "application/x-npy"
OCTETS = "application/octet-stream"
TEXT = "text/plain; charset=utf-8"

FORMATS = ("pandas", "polars", "numpy", "bytes", "text", "file")
"""The formats an artifact is stored in (``ArtifactRef["format"]``)."""


class Encoded:
    """An artifact's bytes (or the local file holding them) and what describes them."""

    def __init__(
        self, fmt: str, media_type: str, ext: str, data: bytes | None, file: Path | None = None
    ) -> None:
        self.format = fmt
        self.media_type = media_type
        # an extension that is not a plain name (a file's own, e.g. ".tar gz") is stored as .bin
        plain = ext == "" or (ext[:1] == "." and ext.isascii() and clean_segment(ext[1:]))
        self.ext = ext if plain else ".bin"
        self.data = data
        self.file = file

    def chunks(self) -> Iterator[bytes]:
        """The bytes to store, a chunk at a time (a file is read as it is written)."""
        if self.data is not None:
            yield self.data
            return
        assert self.file is not None
        with self.file.open("rb") as handle:
            yield from iter(lambda: handle.read(CHUNK), b"")

    def digest(self) -> tuple[str, int]:
        """The sha256 and size of the bytes to store."""
        sha, size = hashlib.sha256(), 0
        for chunk in self.chunks():
            sha.update(chunk)
            size += len(chunk)
        return sha.hexdigest(), size


def _module(value: Any) -> str:
    return type(value).__module__.split(".")[0]


def _parquet_problem(exc: ImportError) -> ArtifactError:
    return ArtifactError(f"storing a DataFrame as Parquet needs pyarrow ({exc}): {EXTRA}")


def encode(value: Any, where: str) -> Encoded:
    """``value`` encoded for storing; ``ArtifactError`` for a value no format takes."""
    if isinstance(value, bytes | bytearray | memoryview):
        return Encoded("bytes", OCTETS, ".bin", bytes(value))
    if isinstance(value, str):
        return Encoded("text", TEXT, ".txt", value.encode("utf-8", "surrogatepass"))
    if isinstance(value, PurePath):
        path = Path(value)
        if not path.is_file():
            raise ArtifactError(
                f"{where}: wf.Artifact({str(path)!r}) names no file this process can read; an "
                "artifact path must be an existing file (write it first, then return its path)"
            )
        guessed = mimetypes.guess_type(path.name)[0] or OCTETS
        return Encoded("file", guessed, path.suffix, None, path)
    module = _module(value)
    if module == "pandas" and hasattr(value, "to_parquet"):
        buffer = io.BytesIO()
        try:
            value.to_parquet(buffer)
        except ImportError as exc:
            raise _parquet_problem(exc) from None
        return Encoded("pandas", PARQUET, ".parquet", buffer.getvalue())
    if module == "polars" and hasattr(value, "write_parquet"):
        buffer = io.BytesIO()
        value.write_parquet(buffer)
        return Encoded("polars", PARQUET, ".parquet", buffer.getvalue())
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
        return Encoded("numpy", NPY, ".npy", buffer.getvalue())
    raise ArtifactError(
        f"{where}: wf.Artifact holds a {type(value).__module__}.{type(value).__qualname__}, which "
        "it cannot store; give it a pandas or polars DataFrame, a numpy array, bytes, str or a "
        "pathlib.Path to a file (serialise other objects to bytes or a file first)"
    )


def decode(fmt: str, data: bytes, uri: str) -> Any:
    """The value stored as ``data`` in the format ``fmt`` (not ``file``: see load_artifact)."""
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
        f"artifact {shown(uri)} has format {fmt!r}, which this wfkit version cannot read; open "
        "it with the wfkit version that wrote it"
    )
