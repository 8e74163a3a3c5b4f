"""The artifacts the engine issued, and which of them a run may load.

Every artifact an attempt stores is recorded in ``wf_artifacts`` (run, node, attempt, URI,
size, SHA-256, format, media type, name) by the writer, in the transaction of the checkpoint
that records the attempt: a recorded artifact is one whose attempt committed, and the files of
an attempt that failed or never committed have no record. A reference is resolved through that
record, never through what it says of itself: a URI with no record was not issued by this
engine and is refused, and a reference whose size, hash, format, media type or name differ from
its record is refused too. What is read is what the record says (its size bounds the read, its
hash checks it, its format decodes it).

Who may load what:

* an activity (``ctx.load``) and ``run.load`` load the artifacts of their own run and of the
  runs in its *family*: the runs linked to it by calls and restarts (``parent_run_id``: a call
  node's child names its caller, ``restart_as_new`` names the run it restarts). Two runs are of
  one family when following ``parent_run_id`` up from each ends at the same run, so a caller,
  its children and grandchildren, their siblings and every restart of any of them load each
  other's artifacts. Anything else is refused, unless the engine was opened with
  ``artifacts_shared=True`` (then every artifact it issued loads in every run);
* ``engine.load_artifact`` loads any artifact the engine issued (its caller holds the engine,
  and with it every run);
* an attempt on another process (a Dask worker) has no store: its job carries the records it
  may load (:class:`CarriedRecords`), resolved as above when it is dispatched, for the
  references found in the run's data, outputs, input, item and the output a compensation
  undoes. A reference it finds any other way is refused there.

A purged run's records go with its rows, so its references no longer load. An archive keeps
them in its ``wf_artifacts*.parquet`` files (:class:`ArchivedRecords`):
``engine.load_artifact(ref, archive=DIR)`` loads the artifacts of archived runs whose files
are still in place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from wfkit.engine.artifact_root import MAX_URI, refused
from wfkit.errors import ArtifactError

__all__ = [
    "ArchivedRecords",
    "ArtifactRecord",
    "CarriedRecords",
    "IssuedRecords",
    "Resolver",
    "references_in",
]

ARTIFACT_KEY = "$artifact"
MAX_CARRIED = 10_000  # most references a job carries the records of
_FAMILY_DEPTH = 10_000  # followed parent links at most (a guard; calls nest far less deep)

_NOT_ISSUED = "this engine did not store it (no artifact was recorded under this URI)"
_THEN_ISSUED = (
    "only references that steps recorded when they returned wf.Artifact load, as long as their "
    "run is kept: load the reference as the step recorded it (in ctx.outputs or ctx.data)"
)
_MISMATCH = (
    "its size, sha256, format, media type or name differ from what was recorded when the "
    "artifact was stored"
)
_OTHER_RUN = (
    "it belongs to a run outside this run's family (the runs linked to it by calls and restarts)"
)
_THEN_SHARE = (
    "pass the value to this run through its input or a call's data, or open the engine with "
    "wf.Engine(..., artifacts_shared=True) to let every run load every artifact"
)


@dataclass(frozen=True)
class ArtifactRecord:
    """What the engine recorded of an artifact it stored (a row of ``wf_artifacts``)."""

    uri: str
    run_id: str
    node_id: str
    attempt: int
    size: int
    sha256: str
    format: str
    media_type: str
    name: str | None

    @classmethod
    def of(cls, ref: Mapping[str, Any], run_id: str, node_id: str, attempt: int) -> ArtifactRecord:
        """The record of a reference an attempt just made."""
        return cls(
            ref[ARTIFACT_KEY],
            run_id,
            node_id,
            attempt,
            ref["size"],
            ref["sha256"],
            ref["format"],
            ref["media_type"],
            ref["name"],
        )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ArtifactRecord:
        """A record from the columns of ``artifact_records`` (uri first, created_at last)."""
        uri, run_id, node_id, attempt, size, sha, fmt, media_type, name = row[:9]
        return cls(uri, run_id, node_id, int(attempt), int(size), sha, fmt, media_type, name)

    def row(self, at: datetime) -> tuple[Any, ...]:
        """The ``insert_artifact`` row."""
        return (
            self.uri,
            self.run_id,
            self.node_id,
            self.attempt,
            self.size,
            self.sha256,
            self.format,
            self.media_type,
            self.name,
            at,
        )

    def matches(self, ref: Mapping[str, Any]) -> bool:
        """True when every field of ``ref`` is what was recorded."""
        size = ref.get("size")
        return (
            type(size) is int
            and size == self.size
            and ref.get("sha256") == self.sha256
            and ref.get("format") == self.format
            and ref.get("media_type") == self.media_type
            and ref.get("name") == self.name
        )


class Resolver(Protocol):
    """Where a loader looks a reference's URI up."""

    def resolve(self, uri: str, run_id: str | None) -> ArtifactRecord:
        """The record of ``uri`` when the run ``run_id`` may load it (any run when None);
        :class:`~wfkit.errors.ArtifactError` (refused) otherwise."""
        ...


@dataclass(frozen=True)
class CarriedRecords:
    """The records a job carries to another process, resolved when it was dispatched; what
    it does not carry is refused there. A plain, picklable value."""

    records: Mapping[str, ArtifactRecord] = field(default_factory=dict)
    refusals: Mapping[str, str] = field(default_factory=dict)  # uri -> why it was refused

    def resolve(self, uri: str, run_id: str | None) -> ArtifactRecord:
        """The carried record of ``uri``."""
        record = self.records.get(uri)
        if record is not None:
            return record
        why = self.refusals.get(uri)
        if why is not None:
            raise refused(uri, why, _then(why))
        raise refused(
            uri,
            "it is not among the references this attempt was given (an attempt on another "
            "process loads the references found in its run's data, outputs, input and item)",
            "put the reference into the run's data or a step's output before this step runs",
        )


class IssuedRecords:
    """The engine's records in its store: what ``ctx.load`` on the engine's threads,
    ``run.load`` and ``engine.load_artifact`` resolve through.

    Parameters
    ----------
    store : Store
        The engine's store.
    shared : bool
        ``artifacts_shared``: every run may load every artifact the engine issued.
    """

    def __init__(self, store: Any, shared: bool = False) -> None:
        self.store = store
        self.shared = shared

    def resolve(self, uri: str, run_id: str | None) -> ArtifactRecord:
        """The record of ``uri`` when the run ``run_id`` may load it (any run when None)."""
        rows = self.store.query("artifact_record", [uri])
        records, refusals = self._allowed(
            {r.uri: r for r in map(ArtifactRecord.from_row, rows)}, [uri], run_id
        )
        if uri in records:
            return records[uri]
        why = refusals[uri]
        raise refused(uri, why, _then(why))

    def resolve_many(
        self, uris: Iterable[str], run_id: str | None
    ) -> tuple[dict[str, ArtifactRecord], dict[str, str]]:
        """The records the run ``run_id`` may load among ``uris``, and why each other one is
        refused (two queries at most, whatever the number)."""
        wanted = sorted(set(uris))
        rows = self.store.query("artifact_records", [wanted])
        return self._allowed({r.uri: r for r in map(ArtifactRecord.from_row, rows)}, wanted, run_id)

    def _allowed(
        self, found: dict[str, ArtifactRecord], wanted: list[str], run_id: str | None
    ) -> tuple[dict[str, ArtifactRecord], dict[str, str]]:
        """``found`` without the records ``run_id`` may not load; why each URI is refused."""
        refusals = {uri: _NOT_ISSUED for uri in wanted if uri not in found}
        others = {r.run_id for r in found.values() if r.run_id != run_id}
        if run_id is None or self.shared or not others:
            return found, refusals
        roots = family_roots(self.store, [run_id, *others])
        mine = roots.get(run_id)
        for uri, record in list(found.items()):
            if record.run_id != run_id and (mine is None or roots.get(record.run_id) != mine):
                del found[uri]
                refusals[uri] = _OTHER_RUN
        return found, refusals

    def carry(self, texts: Iterable[str | None], values: Iterable[Any], run_id: str) -> Any:
        """The records a job of ``run_id`` carries to another process: those of the references
        in ``texts`` (JSON) and ``values``; None when they hold no reference (most jobs: one
        substring test per text)."""
        found: list[str] = []
        for text in texts:
            if text and ARTIFACT_KEY in text:
                references_in(json.loads(text), found)
        for value in values:
            references_in(value, found)
        if not found:
            return None
        records, refusals = self.resolve_many(found[:MAX_CARRIED], run_id)
        return CarriedRecords(records, refusals)


class ArchivedRecords:
    """The records an archive kept (``wf_artifacts*.parquet`` in its directory): any run's."""

    def __init__(self, directory: str | Path) -> None:
        self.files = sorted(str(p) for p in Path(directory).glob("wf_artifacts*.parquet"))
        self.directory = directory

    def resolve(self, uri: str, run_id: str | None) -> ArtifactRecord:
        """The archived record of ``uri``."""
        if self.files:
            import duckdb

            with duckdb.connect(":memory:") as db:
                rows = db.execute(
                    "SELECT uri, run_id, node_id, attempt, size, sha256, format, media_type, "
                    "name FROM read_parquet(?) WHERE uri = ? LIMIT 1",
                    [self.files, uri],
                ).fetchall()
            if rows:
                return ArtifactRecord.from_row(rows[0])
        raise refused(
            uri,
            f"the archive in {self.directory} holds no record of it",
            "give the directory the run was archived into (engine.archive(...)), or leave "
            "archive= out for the artifacts of runs still in the store",
        )


def family_roots(store: Any, run_ids: Sequence[str]) -> dict[str, str]:
    """Each run's topmost ancestor through ``parent_run_id`` (itself when it has none, or when
    its parent was purged); runs not in the store are left out."""
    best: dict[str, tuple[int, str]] = {}
    for start, run_id, depth in store.query("run_ancestors", [sorted(set(run_ids)), _FAMILY_DEPTH]):
        if start not in best or depth > best[start][0]:
            best[start] = (depth, run_id)
    return {start: run_id for start, (_, run_id) in best.items()}


def references_in(value: Any, found: list[str], depth: int = 0) -> None:
    """Append the URI of every artifact reference in ``value`` (dicts and lists) to ``found``."""
    if depth > 100 or len(found) >= MAX_CARRIED:
        return
    if isinstance(value, dict):
        uri = value.get(ARTIFACT_KEY)
        if isinstance(uri, str) and len(uri) <= MAX_URI:  # a longer one is refused anyway
            found.append(uri)
        for item in value.values():
            if isinstance(item, dict | list):
                references_in(item, found, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, dict | list):
                references_in(item, found, depth + 1)


def _then(why: str) -> str:
    return _THEN_SHARE if why == _OTHER_RUN else _THEN_ISSUED


def mismatch(uri: str) -> ArtifactError:
    """The error of a reference whose fields differ from its record."""
    return refused(
        uri,
        _MISMATCH,
        "load the reference exactly as the step recorded it (in ctx.outputs or ctx.data)",
    )
