"""A run's cursor and data, kept in memory while the run is active, and its change log.

The cursor is four small maps — ``tokens`` (where each token stands), ``frames`` (open parallel
and for_each scopes with their join counts), ``visits`` (per node and scope) and ``outputs`` —
plus a token counter and the status; ``saga`` and ``unwinds`` hold the saga stack,
``ending`` the end of a run that waits for its attempts in flight to stop, and ``caller`` the
run whose call node started this one (see :mod:`wfkit.engine.subruns`). The entries are the
typed records of :mod:`wfkit.engine.cursor`. Every change goes through :meth:`RunState.put` /
:meth:`RunState.drop`, which record it, so a checkpoint writes just the changes (the *delta*)
and recovery replays deltas onto the last snapshot. Code is never replayed, only these changes.
A snapshot carries the format version of the cursor's JSON (``v``); older ones are read too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, overload

import jsonpatch

from wfkit.engine.cursor import (
    FORMAT,
    Caller,
    Ending,
    Frame,
    RetryRecord,
    SagaEntry,
    Token,
    Unwind,
    revive,
    revive_all,
)
from wfkit.engine.flows import CompiledFlow
from wfkit.errors import UsageError

__all__ = ["MapName", "RunState"]

MapName = Literal[
    "tokens", "frames", "items", "visits", "outputs", "saga", "unwinds", "ending", "caller", "retry"
]
"""The maps of the cursor (the kinds :meth:`RunState.put` and :meth:`RunState.drop` take)."""

_MAPS: tuple[MapName, ...] = get_args(MapName)
_REVIVED = frozenset({"tokens", "frames", "saga"})  # maps whose entries revive() changes


@dataclass
class RunState:
    """The live state of one run."""

    run_id: str
    flow: CompiledFlow
    data: dict[str, Any]
    status: str = "pending"
    error: str | None = None
    seq: int = 0
    counter: int = 0
    tokens: dict[str, Token] = field(default_factory=dict)
    frames: dict[str, Frame] = field(default_factory=dict)
    # the item list of each open for_each frame, written once when it opens: the frame itself
    # changes with every item and stays small, so a checkpoint never rewrites the items
    items: dict[str, list[Any]] = field(default_factory=dict)
    visits: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    saga: dict[str, SagaEntry] = field(default_factory=dict)  # compensable steps done
    unwinds: dict[str, Unwind] = field(default_factory=dict)  # unwinds in progress
    # the end waiting for attempts in flight to stop (key "run"; see engine/drains.py)
    ending: dict[str, Ending] = field(default_factory=dict)
    # a child run's caller (key "run"): the calling run, its token and call node, the depth
    caller: dict[str, Caller] = field(default_factory=dict)
    # the run attempt and where a failed run goes on when tried again (engine/run_retries.py)
    retry: dict[str, RetryRecord] = field(default_factory=dict)
    data_version: int = 0  # bumped on every data change; jobs remember the version they saw
    # restored from the snapshot an engine wrote as it closed, with nothing running: its ready
    # steps were only queued (not suspects of a crash); any later checkpoint clears it
    closed: bool = False
    # the data document the run was admitted with, as JSON text (wf_instances.input): never
    # changes; ctx.input and run.input decode their own copies of it
    input_json: str | None = field(default=None, repr=False)
    _data_json: str | None = field(default=None, repr=False)
    _outputs_json: str | None = field(default=None, repr=False)
    # changes since the last checkpoint
    _set: dict[str, Any] = field(default_factory=dict, repr=False)
    _del: set[str] = field(default_factory=set, repr=False)
    _patch: list[dict[str, Any]] = field(default_factory=list, repr=False)

    # --- recorded changes -----------------------------------------------------------------------

    @overload
    def put(self, kind: Literal["tokens"], key: str, value: Token) -> None: ...
    @overload
    def put(self, kind: Literal["frames"], key: str, value: Frame) -> None: ...
    @overload
    def put(self, kind: Literal["items"], key: str, value: list[Any]) -> None: ...
    @overload
    def put(self, kind: Literal["visits"], key: str, value: int) -> None: ...
    @overload
    def put(self, kind: Literal["outputs"], key: str, value: Any) -> None: ...
    @overload
    def put(self, kind: Literal["saga"], key: str, value: SagaEntry) -> None: ...
    @overload
    def put(self, kind: Literal["unwinds"], key: str, value: Unwind) -> None: ...
    @overload
    def put(self, kind: Literal["ending"], key: str, value: Ending) -> None: ...
    @overload
    def put(self, kind: Literal["caller"], key: str, value: Caller) -> None: ...
    @overload
    def put(self, kind: Literal["retry"], key: str, value: RetryRecord) -> None: ...

    def put(self, kind: MapName, key: str, value: Any) -> None:
        """Set entry ``key`` of the map ``kind`` (recorded)."""
        getattr(self, kind)[key] = value
        path = f"{kind}:{key}"
        self._set[path] = value
        self._del.discard(path)
        if kind == "outputs":
            self._outputs_json = None

    def drop(self, kind: MapName, key: str) -> None:
        """Remove an entry (recorded)."""
        getattr(self, kind).pop(key, None)
        path = f"{kind}:{key}"
        self._set.pop(path, None)
        self._del.add(path)
        if kind == "outputs":
            self._outputs_json = None

    def set_status(self, status: str, error: str | None = None) -> None:
        """Change the run's status (recorded)."""
        self.status = status
        self.error = error
        self._set["status"] = status
        self._set["error"] = error

    def next_id(self, prefix: str = "t") -> str:
        """A new id unique in this run (``t1``, ``t2``...)."""
        self.counter += 1
        self._set["counter"] = self.counter
        return f"{prefix}{self.counter}"

    def apply_patch(self, ops: list[dict[str, Any]]) -> None:
        """Apply JSON Patch operations to the data document (recorded)."""
        if ops:
            jsonpatch.apply_patch(self.data, ops, in_place=True)
            self.record_patch(ops)

    def record_patch(self, ops: list[dict[str, Any]]) -> None:
        """Record operations already applied to ``data`` in place."""
        if ops:
            self._patch.extend(ops)
            self.data_version += 1
            self._data_json = None

    def data_json(self) -> str:
        """The data document as JSON text, cached until the next change (jobs copy from it)."""
        if self._data_json is None:
            self._data_json = json.dumps(self.data, separators=(",", ":"))
        return self._data_json

    def outputs_json(self) -> str:
        """The outputs as JSON text, cached until the next change: jobs hand activities a copy
        decoded from it, so nothing an activity does to ``ctx.outputs`` reaches the run."""
        if self._outputs_json is None:
            self._outputs_json = json.dumps(self.outputs, separators=(",", ":"), default=str)
        return self._outputs_json

    @property
    def dirty(self) -> bool:
        """True when there are changes not yet taken by :meth:`take_changes`."""
        return bool(self._set or self._del or self._patch)

    def take_changes(self) -> tuple[str | None, str | None]:
        """The recorded delta and patch as JSON text (None when empty), and forget them."""
        delta = None
        if self._set or self._del:
            delta = json.dumps({"s": self._set, "d": sorted(self._del)}, separators=(",", ":"))
        patch = json.dumps(self._patch, separators=(",", ":")) if self._patch else None
        self._set, self._del, self._patch = {}, set(), []
        return delta, patch

    # --- snapshots and replay -----------------------------------------------------------------

    def snapshot(self, *, closed: bool = False) -> str:
        """The whole cursor (not the data) as JSON text, stored on the run's summary row.

        ``closed`` flags the snapshot an engine writes as it closes with no attempt of the run
        running (see :attr:`closed`).
        """
        extra = {"closed": True} if closed else {}
        return json.dumps(
            {
                "v": FORMAT,
                "status": self.status,
                "error": self.error,
                "counter": self.counter,
                **{kind: getattr(self, kind) for kind in _MAPS},
                **extra,
            },
            separators=(",", ":"),
        )

    def freeze(self) -> RunState:
        """A copy of the run as it stands, for readers, sharing nothing they could change.

        The maps are copied one level deep: their entries are never changed in place (every
        change puts a new entry), so the copy stays as it was when taken. Data and outputs are
        kept as JSON text (cached until the next change) and decoded by :meth:`thaw`.
        """
        frozen = RunState(
            self.run_id,
            self.flow,
            {},
            self.status,
            self.error,
            self.seq,
            self.counter,
            **{kind: dict(getattr(self, kind)) for kind in _MAPS},  # type: ignore[arg-type]
        )
        frozen._data_json = self.data_json()
        frozen._outputs_json = self.outputs_json()
        frozen.input_json = self.input_json
        return frozen

    def thaw(self) -> RunState:
        """A reader's own copy of a frozen run (see :meth:`freeze`)."""
        run = RunState(
            self.run_id,
            self.flow,
            json.loads(self.data_json()),
            self.status,
            self.error,
            self.seq,
            self.counter,
            **{kind: dict(getattr(self, kind)) for kind in _MAPS},  # type: ignore[arg-type]
        )
        run.tokens = {t: tok.copy() for t, tok in self.tokens.items()}
        run.outputs = json.loads(self.outputs_json())
        run.input_json = self.input_json
        return run

    @classmethod
    def restore(
        cls, run_id: str, flow: CompiledFlow, data: dict[str, Any], state: str | None, seq: int
    ) -> RunState:
        """Rebuild from a snapshot of any format up to :data:`~wfkit.engine.cursor.FORMAT`
        (``None`` for a run that never had one)."""
        run = cls(run_id, flow, data, seq=seq)
        if state:
            raw = json.loads(state)
            if raw.get("v", 1) > FORMAT:
                raise UsageError(
                    f"run {run_id} was written by a newer wfkit (its cursor has format "
                    f"{raw['v']}; this one reads formats up to {FORMAT}); take it up with that "
                    "version, or upgrade wfkit"
                )
            run.status, run.error, run.counter = raw["status"], raw.get("error"), raw["counter"]
            run.closed = bool(raw.get("closed"))
            for kind in _MAPS:
                entries = raw.get(kind) or {}
                revive_all(kind, entries)
                setattr(run, kind, entries)
        return run

    def replay(self, seq: int, delta: str | None, patch: str | None) -> None:
        """Fold one logged checkpoint row into the state (no code runs)."""
        self.closed = False  # advanced after the snapshot was written
        if patch:
            jsonpatch.apply_patch(self.data, json.loads(patch), in_place=True)
            self.data_version += 1
            self._data_json = None
        if delta:
            changes = json.loads(delta)
            for path, value in changes["s"].items():
                if path == "status":
                    self.status = value
                elif path == "error":
                    self.error = value
                elif path == "counter":
                    self.counter = value
                else:
                    kind, _, key = path.partition(":")
                    getattr(self, kind)[key] = revive(kind, value) if kind in _REVIVED else value
            for path in changes["d"]:
                kind, _, key = path.partition(":")
                getattr(self, kind).pop(key, None)
            self._outputs_json = None
        self.seq = max(self.seq, seq)
