"""Admission: which runs an engine takes — admission policies and active workflow versions.

Before a run is written, its data document is checked against the workflow's model; then every
admission policy the application added with :meth:`Admission.add_admission_policy` is asked.
A policy is a function ``fn(workflow, data, actor)`` returning a list of reasons to refuse the
run (empty to admit it). The model's errors and every policy's reasons come back together in
one :class:`~wfkit.errors.AdmissionError`, model errors first; nothing is written. A policy
sees the validated document (a dict) when the data fits the model, and the data as the caller
gave it (a pydantic model as its dict) when it does not, so that it can add its own reasons to
the model's.

A workflow version can be deactivated (:meth:`Admission.deactivate`): it refuses new runs while
its runs in flight finish; ``engine.start(workflow_id)`` without a version picks the latest
active one. The flag is a column of ``wf_definitions``, so it outlasts the engine process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from wfkit.errors import AdmissionError, UsageError
from wfkit.store.base import Statement

if TYPE_CHECKING:
    from wfkit.definition.workflow import Workflow
    from wfkit.engine.flows import CompiledFlow
    from wfkit.engine.runtime import Runtime
    from wfkit.engine.writer import Writer
    from wfkit.store.base import Store

__all__ = ["Admission", "AdmissionPolicy", "DefinitionInfo", "Gate", "refusal"]

AdmissionPolicy = Callable[["Workflow", Any, "str | None"], list[str]]
"""``fn(workflow, data, actor) -> reasons``: why a run must not start (empty: admit it)."""


@dataclass(frozen=True)
class DefinitionInfo:
    """One registered workflow version, as :meth:`Admission.definitions` lists it."""

    workflow_id: str
    version: int
    active: bool  # False once deactivated: new runs are refused, runs in flight finish
    registered_at: datetime  # when this version was first registered


def refusal(flow: CompiledFlow, reasons: list[str], what: str = "run") -> AdmissionError:
    """The error refusing a run of ``flow`` for ``reasons`` (one per line)."""
    return AdmissionError(
        f"{what} of {flow.id!r} v{flow.version} refused, nothing was written:\n"
        + "\n".join(f"  - {r}" for r in reasons),
        reasons,
    )


def _name(fn: Any) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return f"{module}.{name}" if module and module != "__main__" else str(name)


class Gate:
    """The admission policies and deactivated versions of one engine.

    ``known`` is the engine's map of registered versions (workflow id -> version -> flow),
    shared, so that messages can name the versions that take runs.
    """

    def __init__(self, store: Store, known: dict[str, dict[int, CompiledFlow]]) -> None:
        self._store = store
        self._known = known
        self._lock = threading.Lock()
        self._policies: list[AdmissionPolicy] = []
        self._inactive: set[tuple[str, int]] = set()
        self.load()

    # --- policies -----------------------------------------------------------------------------

    def add(self, fn: AdmissionPolicy) -> None:
        """Add ``fn`` (once: adding it again changes nothing)."""
        if not callable(fn):
            raise UsageError(
                f"an admission policy must be a function fn(workflow, data, actor) returning a "
                f"list of reasons, not {type(fn).__name__} {fn!r}"
            )
        with self._lock:
            if fn not in self._policies:
                self._policies = [*self._policies, fn]

    def remove(self, fn: AdmissionPolicy) -> None:
        """Remove ``fn``; ``UsageError`` when it was never added."""
        with self._lock:
            if fn not in self._policies:
                added = ", ".join(_name(p) for p in self._policies) or "none"
                raise UsageError(
                    f"{_name(fn)} is not an admission policy of this engine (added: {added}); "
                    "remove the function object that was passed to add_admission_policy"
                )
            self._policies = [p for p in self._policies if p is not fn and p != fn]

    def reasons(self, workflow: Workflow, data: Any, actor: str | None) -> list[str]:
        """Every policy's reasons to refuse; a policy that raises is itself a reason."""
        found: list[str] = []
        for fn in self._policies:  # a copy-on-write list: safe to iterate unlocked
            try:
                given = fn(workflow, data, actor)
            except Exception as exc:  # the policy's own bug refuses the run, it never admits it
                found.append(
                    f"admission policy {_name(fn)} raised {type(exc).__name__}: {exc}; "
                    "the run is refused until the policy is fixed"
                )
                continue
            if not isinstance(given, list) or not all(isinstance(r, str) for r in given):
                raise UsageError(
                    f"admission policy {_name(fn)} returned {given!r:.200}, not a list of "
                    "strings; return the reasons to refuse the run as a list of strings "
                    "([] to admit it)"
                )
            found += given
        return found

    # --- active versions ------------------------------------------------------------------------

    def load(self) -> None:
        """Read the deactivated versions from the store."""
        rows = self._store.query("inactive_definitions")
        self._inactive = {(str(wid), int(version)) for wid, version in rows}

    def active(self, workflow_id: str, version: int) -> bool:
        """True unless ``(workflow_id, version)`` is deactivated."""
        return (workflow_id, version) not in self._inactive

    def active_versions(self, workflow_id: str) -> list[int]:
        """The registered versions of ``workflow_id`` that take new runs, oldest first."""
        return sorted(v for v in self._known.get(workflow_id, {}) if self.active(workflow_id, v))

    def check_active(self, flow: CompiledFlow, *, reload: bool = False) -> None:
        """``AdmissionError`` when ``flow``'s version is deactivated (``reload``: ask the
        store first, for a store that other engine processes share)."""
        if reload:
            self.load()
        if self.active(flow.id, flow.version):
            return
        active = self.active_versions(flow.id)
        if active:
            listed = ", ".join(f"v{v}" for v in active)
            todo = f"start v{active[-1]} (or leave the version out)"
        else:
            listed, todo = "none", "register a new version"
        raise AdmissionError(
            f"workflow {flow.id!r} v{flow.version} is deactivated: it takes no new runs (its "
            f"runs in flight finish); active versions: {listed}. {todo[0].upper()}{todo[1:]}, "
            f"or call engine.activate({flow.id!r}, {flow.version}) to take runs on it again",
            [f"workflow {flow.id!r} v{flow.version} is deactivated"],
        )

    def latest_active(self, workflow_id: str) -> int:
        """The latest active version; ``AdmissionError`` when every version is deactivated."""
        active = self.active_versions(workflow_id)
        if active:
            return active[-1]
        versions = ", ".join(f"v{v}" for v in sorted(self._known[workflow_id]))
        newest = max(self._known[workflow_id])
        raise AdmissionError(
            f"every version of workflow {workflow_id!r} is deactivated ({versions}); it takes "
            f"no new runs. Call engine.activate({workflow_id!r}, {newest}) or register a new "
            "version",
            [f"every version of workflow {workflow_id!r} is deactivated"],
        )

    def set_active(self, writer: Writer, workflow_id: str, version: int, active: bool) -> None:
        """Write the flag (under the writer's lock) and remember it."""
        if version not in self._known.get(workflow_id, {}):
            raise UsageError(_unknown(self._known, workflow_id, version))
        with writer.lock:
            writer.store.write(
                [Statement("set_definition_active", [(active, workflow_id, version)])]
            )
            if active:
                self._inactive = self._inactive - {(workflow_id, version)}
            else:
                self._inactive = self._inactive | {(workflow_id, version)}


def _unknown(known: dict[str, dict[int, Any]], workflow_id: str, version: int) -> str:
    versions = known.get(workflow_id)
    if not versions:
        registered = ", ".join(sorted(known)) or "none"
        return (
            f"no workflow {workflow_id!r} is registered (registered: {registered}); "
            "check the id, or register the workflow first"
        )
    listed = ", ".join(map(str, sorted(versions)))
    return f"workflow {workflow_id!r} has no version {version} (versions: {listed}); pick one"


class Admission:
    """The engine's admission commands, over the engine's :class:`Runtime`."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    def add_admission_policy(self, fn: AdmissionPolicy) -> AdmissionPolicy:
        """Ask ``fn(workflow, data, actor)`` before every run is admitted.

        It returns a list of reasons (strings) to refuse the run, empty to admit it. It is asked
        by ``start``, ``start_many`` (every document: all are admitted or none), ``start_async``,
        ``restart_as_new`` and ``POST /api/v1/runs``, with the registered workflow, the data
        document (validated; as given when it does not fit the model) and the caller's actor
        (or None). Returns ``fn``, so it can decorate a function.

        Raises
        ------
        UsageError
            When ``fn`` is not callable. At admission, a policy that returns anything but a list
            of strings makes the start raise ``UsageError``; a policy that raises refuses the
            run, its exception named among the reasons.

        Examples
        --------
        >>> import wfkit as wf
        >>> engine = wf.Engine(":memory:")
        >>> @engine.add_admission_policy
        ... def small(workflow, data, actor):
        ...     return ["amount is over 1000"] if data.get("amount", 0) > 1000 else []
        >>> _ = engine.register(wf.Workflow("pay", 1).start_with())
        >>> try:
        ...     engine.start("pay", {"amount": 5000})
        ... except wf.AdmissionError as exc:
        ...     print(exc.reasons)
        ['amount is over 1000']
        """
        self._rt.definitions.gate.add(fn)
        return fn

    def remove_admission_policy(self, fn: AdmissionPolicy) -> None:
        """Stop asking ``fn``; ``UsageError`` when it was never added."""
        self._rt.definitions.gate.remove(fn)

    def deactivate(self, workflow_id: str, version: int) -> None:
        """Refuse new runs of ``workflow_id`` ``version``; its runs in flight finish.

        Kept in the store (it outlasts this engine). ``engine.start(workflow_id)`` without a
        version then picks the latest version still active; a run asked for on this version is
        refused with an ``AdmissionError`` naming the active versions. Deactivating a
        deactivated version changes nothing.

        Raises
        ------
        UsageError
            For a workflow or version that is not registered.
        """
        self._rt.scheduler.refuse_in_block("engine.deactivate()")
        self._rt.definitions.gate.set_active(self._rt.writer, workflow_id, version, False)

    def activate(self, workflow_id: str, version: int) -> None:
        """Take new runs of ``workflow_id`` ``version`` again (the opposite of deactivate).

        Raises
        ------
        UsageError
            For a workflow or version that is not registered.
        """
        self._rt.scheduler.refuse_in_block("engine.activate()")
        self._rt.definitions.gate.set_active(self._rt.writer, workflow_id, version, True)

    def definitions(self) -> list[DefinitionInfo]:
        """Every registered workflow version, whether it takes new runs, and when it was
        first registered; ordered by workflow id and version."""
        if self._rt.store.shared:
            self._rt.definitions.gate.load()
        first: dict[tuple[str, int], datetime] = {}
        for wid, version, *_rest, at in self._rt.store.query("definitions"):
            first.setdefault((wid, int(version)), at)
        return [
            DefinitionInfo(wid, version, self._rt.definitions.gate.active(wid, version), at)
            for (wid, version), at in sorted(first.items())
            if version in self._rt.definitions.latest.get(wid, {})
        ]
