"""``Workflow``: a definition ``(id, version)`` plus its graph, data model and builder verbs."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import reprlib
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import networkx as nx
from pydantic import BaseModel

from wfkit.definition import keys, pictures, rendering
from wfkit.definition.activities import ActivityRegistry, default_registry
from wfkit.definition.builder import Steps
from wfkit.definition.graph import (
    content_hash,
    graph_from_data,
    graph_to_data,
    start_nodes,
)
from wfkit.definition.kinds import Node, NodeKind
from wfkit.definition.policy import Policy
from wfkit.definition.problems import Problem, Severity
from wfkit.definition.run_retry import RunRetry, run_retry_of
from wfkit.definition.validation import Registered, validate
from wfkit.definition.values import text_problem
from wfkit.errors import DefinitionError, UsageError

__all__ = ["WORKFLOW_FORMAT", "Models", "Workflow", "import_model"]

WORKFLOW_FORMAT = "wfkit.workflow/1"

Models = Mapping[str, type[BaseModel]] | Iterable[type[BaseModel]]
"""Data models handed to :meth:`Workflow.from_json`: classes, or ``{"module:Name": class}``."""

_MODEL_PATH = re.compile(
    r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:(?:[A-Za-z_]\w*|<locals>)(?:\.(?:[A-Za-z_]\w*|<locals>))*"
)
"""``module:Qualname`` as ``to_json`` writes it (a class defined in a function has ``<locals>``)."""


class Workflow(Steps):
    """A workflow definition: an id, a version, a data model and a ``networkx.MultiDiGraph``.

    Build it with the verbs (``start_with``, ``then``, ``if_``...), or hand a graph to
    :meth:`from_graph`. ``flow.graph`` is the live graph: edit it with networkx and the workflow
    sees the change.

    Parameters
    ----------
    id : str
        Workflow id, e.g. ``"onboarding"``.
    version : int
        Runs pin the version they were started with; bump it when the graph changes.
    data : pydantic model class, optional
        Model of the data document; expressions and admissions are checked against it.
    retry : RunRetry, optional
        Try a run that failed for good again, from where it failed (see :class:`RunRetry`);
        kept in the graph (``G.graph['run_retry']``), so it is part of the JSON and the hash.

    Examples
    --------
    >>> import wfkit as wf
    >>> flow = wf.Workflow("hello", version=1).start_with("docs.greet").then("docs.log")
    >>> list(flow.graph.nodes)
    ['start', 'docs.greet', 'docs.log']
    >>> [k for _, _, k in flow.graph.edges(keys=True)]
    ['next', 'next']
    """

    def __init__(
        self,
        id: str,
        version: int = 1,
        data: type[BaseModel] | None = None,
        *,
        graph: nx.MultiDiGraph | None = None,
        strict_merges: bool | None = None,
        retry: RunRetry | None = None,
    ) -> None:
        if not isinstance(id, str) or not id.strip():
            raise UsageError(f"a workflow id must be a non-empty string, got {reprlib.repr(id)}")
        problem = text_problem(id)
        if problem is not None:
            raise UsageError(f"the workflow id {reprlib.repr(id)} {problem}")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise UsageError(
                f"version must be a whole number of 1 or more, got {reprlib.repr(version)}"
            )
        if data is not None and not (isinstance(data, type) and issubclass(data, BaseModel)):
            raise UsageError(f"data must be a pydantic model class, got {reprlib.repr(data)}")
        graph = nx.MultiDiGraph() if graph is None else graph
        if not isinstance(graph, nx.MultiDiGraph):
            raise UsageError(
                f"a workflow graph must be a networkx.MultiDiGraph (edge key = outlet), got "
                f"{type(graph).__name__}; convert it with nx.MultiDiGraph(G)"
            )
        super().__init__(graph, [])
        self.id = id
        self.version = version
        self.data_model = data
        self.data_model_ref: str | None = None
        """The ``module:Name`` a loaded document named as data model when it was not loaded
        (see :meth:`from_json`); kept so that ``to_json`` writes it back. ``None`` otherwise."""
        if strict_merges is not None:
            self._graph.graph[keys.STRICT_MERGES] = bool(strict_merges)
        if retry is not None:
            if not isinstance(retry, RunRetry):
                raise UsageError(
                    f"retry must be a wf.RunRetry, got {reprlib.repr(retry)}; write it like "
                    "retry=wf.RunRetry(max_attempts=3, delay='1m')"
                )
            self._graph.graph[keys.RUN_RETRY] = retry.model_dump(mode="json")

    # --- building ---------------------------------------------------------------------------

    @property
    def strict_merges(self) -> bool:
        """True when two parallel steps changing the same data path fail the run."""
        return bool(self._graph.graph.get(keys.STRICT_MERGES, False))

    @property
    def retry(self) -> RunRetry | None:
        """The run retry budget (``None``: a run that fails for good stays failed).

        Raises
        ------
        DefinitionError
            When ``G.graph['run_retry']`` was edited into something that is not a RunRetry.
        """
        try:
            return run_retry_of(self._graph)
        except ValueError as exc:  # pydantic's ValidationError is one
            raise DefinitionError(
                f"Workflow {self.id!r} v{self.version}: G.graph['run_retry'] is malformed "
                f"({_brief(exc)}); set it with wf.Workflow(..., retry=wf.RunRetry(...))"
            ) from None

    @property
    def graph(self) -> nx.MultiDiGraph:
        """The workflow graph: nodes carry typed attributes, edge keys are outlet names."""
        return self._graph

    def start_with(
        self,
        activity: str | None = None,
        *,
        label: str | None = None,
        policy: Policy | dict[str, Any] | None = None,
        **policy_fields: Any,
    ) -> Workflow:
        """Add the start node and, if given, a first action running ``activity``."""
        if start_nodes(self._graph):
            raise UsageError(f"workflow {self.id!r} already has a start node; call start_with once")
        self._cursor = []
        self._add("start", kind=NodeKind.START)
        self._cursor = [("start", "next")]
        if activity is not None:
            self.then(activity, label=label, policy=policy, **policy_fields)
        return self

    @classmethod
    def from_graph(
        cls, id: str, version: int, G: nx.MultiDiGraph, *, data: type[BaseModel] | None = None
    ) -> Workflow:
        """Wrap a graph built by hand or by networkx code (used as is, not copied)."""
        return cls(id, version, data, graph=G)

    def copy(self, *, version: int | None = None) -> Workflow:
        """An independent copy (optionally under another version)."""
        twin = Workflow(
            self.id,
            self.version if version is None else version,
            self.data_model,
            graph=graph_from_data(graph_to_data(self._graph)),
        )
        twin.data_model_ref = self.data_model_ref
        return twin

    # --- checking ---------------------------------------------------------------------------

    def validate(
        self,
        *,
        registry: ActivityRegistry | None = default_registry,
        workflows: Registered | None = None,
    ) -> list[Problem]:
        """Every problem of this workflow (errors first, then warnings); empty when valid.

        ``registry`` is where activity names must be registered (``None`` skips that rule);
        ``workflows`` (id -> version -> data model) are the workflows a call may start, as
        ``engine.register`` passes them (``None``, the default, skips that rule).
        A data model named by a loaded document but not loaded (see :meth:`from_json`) is a
        ``data-model-not-loaded`` error: expressions and admissions could not be checked.
        """
        problems = validate(
            self._graph,
            registry=registry,
            data_model=self.data_model,
            workflows=workflows,
            workflow_id=self.id,
        )
        if self.data_model is None and self.data_model_ref is not None:
            problems.insert(
                0,
                Problem(
                    code="data-model-not-loaded",
                    message=f"the data model {self.data_model_ref!r} was not loaded: loading a "
                    "definition imports no code; pass the model with "
                    "Workflow.from_json(text, models=[YourModel]) (or data=YourModel), or allow "
                    "its package with allow_imports=('yourpackage.',)",
                ),
            )
        return problems

    def check(
        self,
        *,
        registry: ActivityRegistry | None = default_registry,
        workflows: Registered | None = None,
    ) -> Workflow:
        """Raise :class:`~wfkit.DefinitionError` carrying every error; return self when valid."""
        errors = [
            p
            for p in self.validate(registry=registry, workflows=workflows)
            if p.severity == Severity.ERROR
        ]
        if errors:
            raise DefinitionError.from_problems(f"Workflow {self.id!r} v{self.version}", errors)
        return self

    @property
    def content_hash(self) -> str:
        """SHA-256 of the graph's content; equal graphs hash equal whatever their build order."""
        return content_hash(self._graph)

    def node(self, node_id: str) -> Node:
        """The validated attributes of ``node_id``."""
        if node_id not in self._graph:
            raise UsageError(f"workflow {self.id!r} has no node {node_id!r}")
        return Node.model_validate(self._graph.nodes[node_id])

    # --- JSON -------------------------------------------------------------------------------

    def to_data(self) -> dict[str, Any]:
        """Plain JSON-ready data: id, version, data model path and the graph."""
        return {
            "format": WORKFLOW_FORMAT,
            "id": self.id,
            "version": self.version,
            "data_model": _model_path(self.data_model) or self.data_model_ref,
            "graph": graph_to_data(self._graph),
        }

    def to_json(self, *, indent: int | None = None) -> str:
        """Serialise to JSON; :meth:`from_json` gives back an equal workflow."""
        return json.dumps(self.to_data(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_data(
        cls,
        data: dict[str, Any],
        *,
        model: type[BaseModel] | None = None,
        models: Models = (),
        allow_imports: bool | Iterable[str] = False,
    ) -> Workflow:
        """Rebuild from :meth:`to_data`; see :meth:`from_json` for the data model arguments."""
        if not isinstance(data, Mapping):
            raise DefinitionError(
                f"not a wfkit workflow (a {type(data).__name__}, not a mapping with format "
                f"{WORKFLOW_FORMAT!r}); write it with Workflow.to_json()"
            )
        if data.get("format") != WORKFLOW_FORMAT:
            raise DefinitionError(
                f"not a wfkit workflow (format {reprlib.repr(data.get('format'))}, expected "
                f"{WORKFLOW_FORMAT!r}); write it with Workflow.to_json()"
            )
        if "id" not in data or "version" not in data:
            raise DefinitionError(
                "not a wfkit workflow: it has no id or no version; write it with Workflow.to_json()"
            )
        ref = data.get("data_model") or None
        if model is None and ref is not None:
            model = _resolve_model(ref, data["id"], models, allow_imports)
        try:
            graph = graph_from_data(data["graph"])
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise DefinitionError(
                f"workflow {reprlib.repr(data.get('id'))} holds a malformed graph "
                f"({_brief(exc)}); write it with Workflow.to_json()"
            ) from exc
        flow = cls(data["id"], data["version"], model, graph=graph)
        if model is None and ref is not None:
            flow.data_model_ref = ref
        return flow

    @classmethod
    def from_json(
        cls,
        text: str | bytes,
        *,
        data: type[BaseModel] | None = None,
        models: Models = (),
        allow_imports: bool | Iterable[str] = False,
    ) -> Workflow:
        """Rebuild a workflow written by :meth:`to_json`.

        Loading a definition runs no code: the document's ``data_model`` (``"module:Name"``)
        is looked up, in this order, as ``data`` (used whatever the document says), among
        ``models`` (classes, or a mapping from ``"module:Name"`` to class), and in modules
        this process has already imported. Only if ``allow_imports`` is ``True`` (any module)
        or holds a prefix of the module's name (``("myapp.",)``) is the module imported.
        A model found nowhere is kept as text in ``data_model_ref`` (``to_json`` writes it
        back) and :meth:`validate` reports it as a ``data-model-not-loaded`` error.

        Raises
        ------
        DefinitionError
            When the text is not a workflow written by ``to_json``, or names as data model
            something that is not a pydantic model, or a module it may import fails to load.
        """
        try:
            document = json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise DefinitionError(
                f"the text is not a readable wfkit workflow: not JSON ({_brief(exc)}); "
                "write it with Workflow.to_json()"
            ) from exc
        return cls.from_data(document, model=data, models=models, allow_imports=allow_imports)

    # --- pictures ---------------------------------------------------------------------------

    def to_dot(self, *, problems: bool = True) -> str:
        """Graphviz DOT source of the picture (problems drawn on their nodes)."""
        return rendering.to_dot(self._graph, self._problems(problems), title=self._title())

    def render(self, path: str | Path, *, format: str | None = None, problems: bool = True) -> Path:
        """Write the picture to ``path``; the format (svg, png, pdf) follows the suffix."""
        return rendering.render(
            self._graph,
            path,
            format=format,
            problems=self._problems(problems),
            title=self._title(),
        )

    def to_svg(self, *, problems: bool = True) -> str:
        """The picture as SVG text (deterministic: the same graph gives the same bytes)."""
        return rendering.to_svg(self._graph, problems=self._problems(problems), title=self._title())

    def _problems(self, enabled: bool) -> list[Problem]:
        return self.validate() if enabled else []

    def _title(self) -> str:
        try:
            retry = run_retry_of(self._graph)
        except ValueError:  # drawn anyway: validation reports it on the picture
            retry = None
        suffix = f" ({retry.describe()})" if retry is not None else ""
        return f"{self.id} v{self.version}{suffix}"

    def _repr_svg_(self) -> str | None:
        try:
            return self.to_svg()
        except rendering.RenderingUnavailable:
            return None

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        # text/html first: front ends show image/svg+xml as an <img> (no tooltips, no scaling)
        bundle = {"text/plain": repr(self)}
        svg = self._repr_svg_()
        if svg is not None:
            bundle["text/html"] = pictures.picture_html(svg)
            bundle["image/svg+xml"] = svg
        return bundle

    def __repr__(self) -> str:
        G = self._graph
        return (
            f"Workflow({self.id!r}, version={self.version}, "
            f"{G.number_of_nodes()} nodes, {G.number_of_edges()} edges)"
        )


def _model_path(model: type[BaseModel] | None) -> str | None:
    if model is None:
        return None
    return f"{model.__module__}:{model.__qualname__}"


def import_model(path: str, what: str) -> type[BaseModel]:
    """The pydantic model named ``module:Qualname`` (e.g. a wait's payload model), looked up in
    the modules this process has already imported: a definition never makes the process import
    (run) a module. ``DefinitionError`` says what to import when it is not loaded."""
    if not isinstance(path, str) or not _MODEL_PATH.fullmatch(path):
        raise DefinitionError(f"{what} is {reprlib.repr(path)}, not a 'module:Name' path")
    module_name, _, qualname = path.partition(":")
    module = sys.modules.get(module_name)
    found = _loaded_attribute(module, qualname) if isinstance(module, ModuleType) else None
    if found is None:
        raise DefinitionError(
            f"{what} is {path!r}, which is not loaded in this process: import module "
            f"{module_name!r} before the run needs it (e.g. `wfkit worker --module ...`); a "
            "definition never imports code by itself"
        )
    if not (isinstance(found, type) and issubclass(found, BaseModel)):
        raise DefinitionError(f"{what} is {path!r}, which is not a pydantic model")
    return found


def _brief(exc: BaseException | str, limit: int = 200) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _resolve_model(
    ref: object, workflow_id: object, models: Models, allow_imports: bool | Iterable[str]
) -> type[BaseModel] | None:
    """The model ``ref`` names, without importing unless allowed; None when not loaded."""
    if isinstance(models, Mapping):
        given = dict(models)
    else:
        given = {}
        for m in models if not isinstance(models, type) else (models,):  # one class alone
            if not (isinstance(m, type) and issubclass(m, BaseModel)):
                raise UsageError(f"models= takes pydantic model classes, got {m!r}")
            given[f"{m.__module__}:{m.__qualname__}"] = m
    if isinstance(ref, str) and ref in given:
        return _checked_model(given[ref], ref, workflow_id)
    if not isinstance(ref, str) or not _MODEL_PATH.fullmatch(ref):
        raise DefinitionError(
            f"workflow {reprlib.repr(workflow_id)} names data model {reprlib.repr(ref)}, which "
            "is not a 'module:Name' path; write the workflow with Workflow.to_json()"
        )
    module_name, _, qualname = ref.partition(":")
    module = sys.modules.get(module_name)
    if isinstance(module, ModuleType):
        found = _loaded_attribute(module, qualname)
        if found is not None:
            return _checked_model(found, ref, workflow_id)
    if _may_import(module_name, allow_imports):
        return _import_model(ref, str(workflow_id))
    return None


def _loaded_attribute(module: ModuleType, qualname: str) -> object | None:
    """``module.qualname`` read statically: no module ``__getattr__``, no descriptors run."""
    target: object = module
    for part in qualname.split("."):
        target = inspect.getattr_static(target, part, None)
        if target is None:
            return None
    return target


def _may_import(module_name: str, allow_imports: bool | Iterable[str]) -> bool:
    if isinstance(allow_imports, bool):
        return allow_imports
    if isinstance(allow_imports, str):
        allow_imports = (allow_imports,)
    for prefix in allow_imports:
        package = prefix.rstrip(".")
        if package and (module_name == package or module_name.startswith(package + ".")):
            return True
    return False


def _checked_model(target: object, ref: str, workflow_id: object) -> type[BaseModel]:
    if not (isinstance(target, type) and issubclass(target, BaseModel)):
        raise DefinitionError(f"data model {ref!r} of {workflow_id!r} is not a pydantic model")
    return target


def _import_model(path: str, workflow_id: str, purpose: str = "data model") -> type[BaseModel]:
    module_name, _, qualname = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise DefinitionError(
            f"{workflow_id!r} names {purpose} {path!r}, which cannot be imported "
            f"({exc}); make its module importable"
            + (", or pass data=YourModel to from_json" if purpose == "data model" else "")
        ) from exc
    if not (isinstance(target, type) and issubclass(target, BaseModel)):
        raise DefinitionError(f"data model {path!r} of {workflow_id!r} is not a pydantic model")
    return target
