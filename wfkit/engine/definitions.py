"""The registered workflows of one engine: registering, loading, resolving and admitting.

:class:`Definitions` keeps the versions registered (``latest``: workflow id -> version -> flow),
the graphs runs grew with ``engine.append`` (``grown``) and the admission :class:`Gate`. It
answers which flow a start, a restart or a call node runs on, and turns a start's documents
into the writer command that adds the runs (:meth:`Definitions.admission`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from wfkit.definition.graph import graph_from_data, starts_child_runs
from wfkit.definition.problems import Severity
from wfkit.definition.validation import validate_data
from wfkit.definition.workflow import Workflow
from wfkit.engine.admission import Gate, refusal
from wfkit.engine.flows import CompiledFlow
from wfkit.engine.operations import refuse_unstorable
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import EventKind
from wfkit.errors import AdmissionError, DefinitionError
from wfkit.store.base import Statement

if TYPE_CHECKING:
    from wfkit.definition.activities import ActivityRegistry
    from wfkit.engine.clock import Clock
    from wfkit.engine.scheduler import Scheduler
    from wfkit.engine.writer import Writer
    from wfkit.store.base import Store

__all__ = ["Definitions"]

log = logging.getLogger("wfkit.engine")


class Definitions:
    """The workflows an engine knows, and admission of new runs on them."""

    def __init__(
        self,
        store: Store,
        writer: Writer,
        scheduler: Scheduler,
        clock: Clock,
        registry: ActivityRegistry,
        max_payload: int,
    ) -> None:
        self.store = store
        self.writer = writer
        self.scheduler = scheduler
        self.clock = clock
        self.registry = registry
        self.max_payload = max_payload
        self.latest: dict[str, dict[int, CompiledFlow]] = {}
        # runs' own graphs grown by append(): (id, version, hash) -> the registered hash
        self.grown: dict[tuple[str, int, str], str] = {}
        self.gate = Gate(store, self.latest)

    def load(self) -> None:
        """Read the definitions the store holds that this engine has not loaded yet."""
        for wid, version, digest, registered in self.store.query("grown_definitions"):
            self.grown[(wid, version, digest)] = registered
        for wid, version, digest, graph_json, model_path, _at in self.store.query("definitions"):
            if (wid, version, digest) in self.writer.flows:
                continue
            data = json.loads(graph_json)
            try:
                workflow = Workflow.from_data(data, allow_imports=True)  # own store
            except DefinitionError:
                log.warning("data model %s of %s v%s cannot be imported", model_path, wid, version)
                workflow = Workflow(wid, version, None, graph=graph_from_data(data["graph"]))
            flow = self.writer.add_flow(workflow)
            if (wid, version, digest) not in self.grown:  # a run's own graph is no version
                self.latest.setdefault(wid, {})[version] = flow

    def register(self, workflow: Workflow) -> Workflow:
        """``engine.register``: validate and store ``workflow`` (see its docstring)."""
        self.scheduler.refuse_in_block("engine.register()")
        if self.store.shared and starts_child_runs(workflow.graph):
            self.load()  # a called workflow another engine registered counts
        registered = {
            wid: {v: flow.data_model for v, flow in versions.items()}
            for wid, versions in self.latest.items()
        }
        errors = [
            p
            for p in workflow.validate(registry=self.registry, workflows=registered)
            if p.severity == Severity.ERROR
        ]
        if errors:
            raise DefinitionError.from_problems(
                f"Workflow {workflow.id!r} v{workflow.version}", errors
            )
        digest = workflow.content_hash
        known = self.latest.get(workflow.id, {}).get(workflow.version)
        if known is not None and known.hash == digest:
            return workflow
        with self.writer.lock:
            self._store_version(workflow, digest)
        return workflow

    def _store_version(self, workflow: Workflow, digest: str) -> None:
        """Write a new ``(id, version)`` (under the writer's lock), unless runs in flight on
        that version follow another graph."""
        in_flight = self.store.query("runs_in_flight", [workflow.id, workflow.version, digest])[0][
            0
        ]
        if in_flight:
            latest = max(self.latest.get(workflow.id, {workflow.version: None}))
            raise DefinitionError(
                f"Workflow {workflow.id!r} v{workflow.version} has {in_flight} runs in flight "
                f"and its graph changed; register it as version {latest + 1} (in-flight runs "
                f"finish on v{workflow.version})"
            )
        snapshot = workflow.copy()
        key = (workflow.id, workflow.version, digest)
        # a graph first stored as a run's grown graph (append) becomes the version's graph
        grown = self.grown.pop(key, None) is not None
        if key not in self.writer.flows or grown:
            row = (
                workflow.id,
                workflow.version,
                digest,
                snapshot.to_json(),
                snapshot.to_data()["data_model"],
                self.clock.now(),
            )
            self.store.write(
                [
                    Statement("insert_definition", [row]),
                    Statement("register_grown_definition", [key] if grown else []),
                ]
            )
        flow = self.writer.add_flow(snapshot)
        self.latest.setdefault(workflow.id, {})[workflow.version] = flow

    def resolve(self, workflow_id: str, version: int | None) -> CompiledFlow:
        """The registered flow (the latest version when ``version`` is None);
        ``AdmissionError`` for an unknown workflow or version."""
        versions = self.latest.get(workflow_id)
        if not versions:
            known = ", ".join(sorted(self.latest)) or "none"
            raise AdmissionError(
                f"no workflow {workflow_id!r} is registered (registered: {known}); "
                "call engine.register(flow) first",
                [f"unknown workflow {workflow_id!r}"],
            )
        chosen = max(versions) if version is None else version
        if chosen not in versions:
            raise AdmissionError(
                f"workflow {workflow_id!r} has no version {version} (versions: "
                f"{', '.join(map(str, sorted(versions)))}); pick one of those",
                [f"unknown version {version}"],
            )
        return versions[chosen]

    def resolve_call(self, workflow_id: str, version: int | None) -> CompiledFlow:
        """The workflow a call node starts: on a shared store another engine may have
        registered it (or a later version) since this one loaded the definitions."""
        known = self.latest.get(workflow_id, {})
        if self.store.shared and (version is None or version not in known):
            # (a pinned version this engine knows resolves the same whatever else was added)
            latest = self.store.query("latest_definition_version", [workflow_id])[0][0]
            if latest is not None and (version is not None or latest not in known):
                self.load()
        return self.startable(workflow_id, version)  # as for a start

    def startable(self, workflow_id: str, version: int | None) -> CompiledFlow:
        """The flow a new run starts on: ``version``, else the latest active one;
        AdmissionError for an unknown workflow or version, or a deactivated one."""
        flow = self.resolve(workflow_id, self.admissible(workflow_id, version))
        self.gate.check_active(flow)
        return flow

    def admissible(self, workflow_id: str, version: int | None) -> int | None:
        """The version a start asks for: the latest active one when ``version`` is None (None
        for an unknown workflow: resolving it says so)."""
        if self.store.shared:
            self.gate.load()
        if version is not None or not self.latest.get(workflow_id):
            return version
        return self.gate.latest_active(workflow_id)

    def admission(
        self, workflow_id: str, documents: Iterable[Any], version: int | None, actor: str | None
    ) -> Callable[[Writer], list[str]]:
        """Check documents before anything is queued (AdmissionError writes nothing); return
        the command that adds the runs to the writer's batch."""
        self.scheduler.refuse_closed()
        flow = self.startable(workflow_id, version)
        refuse_unstorable(AdmissionError, f"starting {workflow_id!r}", actor=actor)
        docs = [self.admit(flow, d, actor) for d in documents]
        texts = [json.dumps(doc, separators=(",", ":")) for doc in docs]
        caller = self.writer.tracing.current() if self.writer.tracing else None

        def admit(writer: Writer) -> list[str]:
            self.gate.check_active(flow)  # a deactivate committed since the check above wins
            ids: list[str] = []
            for doc, text in zip(docs, texts, strict=True):
                run = RunState(uuid.uuid4().hex[:16], flow, doc)
                writer.add_instance(run, text, actor, caller=caller)
                cp = writer.checkpoint(run, actor)
                detail = {"workflow": flow.id, "version": flow.version}
                cp.event(EventKind.RUN_STARTED, detail=detail)
                cp.spawn(flow.start, [])
                ids.append(run.run_id)
            return ids

        return admit

    def admit(self, flow: CompiledFlow, data: Any, actor: str | None = None) -> dict[str, Any]:
        """The document as admitted; ``AdmissionError`` with the model's errors and then every
        admission policy's reasons (policies see the data as given when the model refused it)."""
        model = flow.data_model
        if data is None:
            data = {}
        problems = validate_data(data, model, max_payload=self.max_payload)
        doc: dict[str, Any] | None = None
        if problems:
            reasons = [p.message for p in problems]
        elif model is not None:
            source = data.model_dump() if isinstance(data, BaseModel) else data
            doc = model.model_validate(source).model_dump(mode="json")
        elif isinstance(data, BaseModel):
            doc = data.model_dump(mode="json")
        elif not isinstance(data, dict):
            raise AdmissionError(
                f"run of {flow.id!r} refused: the data document must be a JSON object (a dict), "
                f"got {type(data).__name__}; wrap it, e.g. {{'value': ...}}",
                ["data is not an object"],
            )
        else:
            doc = json.loads(json.dumps(data))
        if doc is not None:
            reasons = self.gate.reasons(flow.workflow, doc, actor)
        else:
            given = data.model_dump() if isinstance(data, BaseModel) else data
            reasons += self.gate.reasons(flow.workflow, given, actor)
        if reasons or doc is None:
            raise refusal(flow, reasons)
        return doc
