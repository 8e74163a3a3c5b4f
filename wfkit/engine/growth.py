"""Growing a run in flight: ``engine.append(run_id, steps)`` adds steps after its graph's ends.

A run pins its graph by ``(workflow id, version, content hash)``: ``wf_instances.hash`` names a
``wf_definitions`` row. Appending builds the run's grown graph (the builder starts at the open
ends of the run's current graph, :func:`wfkit.definition.splicing.open_ends`), validates it as a
registration would, and — as one of the writer's commands, so atomically with the run's own
checkpoints — stores it as a definition row of its own (``run_id`` and ``grown_from`` say whose
it is and which registered graph it grew from), repins the run to it and records
``run.appended``. The registered graph and the other runs of that version are untouched; any
engine process that takes the run up later loads the grown graph from the store.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import networkx as nx

from wfkit.definition.builder import Steps
from wfkit.definition.problems import Severity
from wfkit.definition.splicing import end_labels, open_ends
from wfkit.definition.workflow import Workflow
from wfkit.engine.operations import refuse_unstorable
from wfkit.engine.records import RunStatus
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import EventKind, TokenState
from wfkit.errors import DefinitionError, UsageError

if TYPE_CHECKING:
    from wfkit.engine.runtime import Runtime
    from wfkit.engine.writer import Writer

__all__ = ["Growth", "grow_graph"]

T = TypeVar("T")

Exit = tuple[str, str]


class Growth:
    """``engine.append``, over the engine's :class:`Runtime` (its commands and definitions)."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    def append(
        self, run_id: str, steps: Callable[[Steps], Any], *, actor: str | None = None
    ) -> Workflow:
        """Add steps to a run in flight, after the steps its graph already has.

        ``steps`` receives a builder positioned at the run's *open ends*: every outlet of the
        run's graph where a path ends (``next`` of a last step, an open decision branch, a
        join's ``completed``, an approval's ``approved``; never ``failed``, ``fallback`` or the
        other outlets that fail a step, nor the inside of a parallel/for_each body). Each of
        them leads into the first new step, so a token that reaches one of them from now on
        goes on into the new steps. The grown graph is validated like a registration and
        becomes the run's own pinned graph (a new content hash, stored), recorded as the event
        ``run.appended`` with the new hash and the added node ids. The registered graph
        (``engine.definition``) and the other runs of the workflow are not changed.

        The append is one of the writer's commands: it commits atomically with respect to the
        run's own checkpoints, so either the run was still in flight when it committed (and
        runs the new steps when its paths get there) or it is refused.

        Parameters
        ----------
        run_id : str
            A run that is pending, running, waiting or suspended.
        steps : callable
            ``lambda b: b.then("x").then("y")``: builder verbs (``then``, ``if_``, ``parallel``,
            ``saga``, ``splice``...). ``b.goto(node)`` may loop back into the existing graph.
        actor : str, optional
            Who grew the run (recorded on the event).

        Returns
        -------
        Workflow
            A copy of the run's grown graph (``run.workflow`` is the run's own from now on).

        Raises
        ------
        DefinitionError
            When the grown graph breaks a rule (an unregistered activity, an expression the
            data model cannot answer...), with every problem; nothing is written.
        UsageError
            When the run has ended, is ending (it drains its attempts before it fails or is
            cancelled), has ended every path and only waits for attempts asked to stop (it
            completes then), or is unwinding its saga; when its graph has no open end, or when
            ``steps`` adds nothing. Nothing is written.

        Examples
        --------
        >>> import wfkit as wf
        >>> reg = wf.ActivityRegistry()
        >>> for name in ("docs.a", "docs.b"):
        ...     reg.register(name, lambda ctx: None)
        >>> engine = wf.Engine(":memory:", registry=reg)
        >>> _ = engine.register(wf.Workflow("grow", 1).start_with("docs.a").wait_for_signal("go"))
        >>> run = engine.start("grow", {})
        >>> engine.run_until_idle()
        >>> grown = engine.append(run.id, lambda b: b.then("docs.b"))
        >>> list(grown.graph.successors("go"))
        ['docs.b']
        >>> _ = engine.signal("go"); engine.run_until_idle()
        >>> run.status.value, run.history()[-2].kind.value
        ('completed', 'step.completed')
        >>> engine.close()
        """
        if not callable(steps):
            raise UsageError(
                f"append({run_id!r}, ...) takes the steps as a callable, e.g. "
                f"lambda b: b.then('x'); got {type(steps).__name__}"
            )
        refuse_unstorable(UsageError, f"appending to run {run_id}", actor=actor)

        def grow(writer: Writer) -> Workflow:
            with self._rt.operations.holding(run_id) as run:
                refuse_ended(run)
                base = run.flow.workflow
                grown, added, ends = grow_graph(base, steps, run_id)
                problems = grown.validate(registry=self._rt.registry)
                errors = [p for p in problems if p.severity == Severity.ERROR]
                if errors:
                    raise DefinitionError.from_problems(
                        f"Growing run {run_id} of {base.id!r} v{base.version} (nothing was "
                        "written)",
                        errors,
                    )
                digest = grown.content_hash
                key = (base.id, base.version, digest)
                flow = writer.flows.get(key) or writer.add_flow(grown)
                registered = self._rt.definitions.grown.get(
                    (base.id, base.version, run.flow.hash), run.flow.hash
                )
                cp = writer.checkpoint(run, actor)
                cp.event(
                    EventKind.RUN_APPENDED,
                    detail={
                        "hash": digest,
                        "previous": run.flow.hash,
                        "nodes": added,
                        "ends": [list(end) for end in ends],
                    },
                )
                cp.graph = (
                    base.id,
                    base.version,
                    digest,
                    flow.workflow.to_json(),
                    flow.workflow.to_data()["data_model"],
                    cp.now,
                    run_id,
                    registered,
                )
                run.flow = flow
                if key != (base.id, base.version, registered):
                    self._rt.definitions.grown[key] = registered
                return flow.workflow.copy()

        return self._rt.operations.command(grow)


def refuse_ended(run: RunState) -> None:
    """Raise ``UsageError`` for a run that cannot grow: ended, ending, complete but for
    attempts asked to stop, or unwinding."""
    status = RunStatus(run.status)
    if status.terminal:
        raise UsageError(
            f"run {run.run_id} is {status.value}: a run that ended cannot grow; nothing was "
            "appended. Start a new run, or register a new version with the steps"
        )
    if run.ending:
        ending = run.ending.get("run")
        end = ending["end"] if ending is not None else "ending"
        raise UsageError(
            f"run {run.run_id} is ending ({end}): it waits for its attempts in flight to stop "
            "and then ends, so it cannot grow; nothing was appended"
        )
    stopping = [t["node"] for t in run.tokens.values() if t["st"] == TokenState.CANCELLING]
    if stopping and len(stopping) == len(run.tokens):
        raise UsageError(
            f"run {run.run_id} has ended every path and only waits for "
            f"{len(stopping)} attempt{'s' if len(stopping) != 1 else ''} asked to stop "
            f"({', '.join(map(repr, sorted(stopping)))}); it completes once they have, so no "
            "token is left to take new steps and it cannot grow; nothing was appended"
        )
    if status == RunStatus.COMPENSATING:
        raise UsageError(
            f"run {run.run_id} is compensating: its saga unwinds and the run then fails, so "
            "it cannot grow; nothing was appended"
        )


def grow_graph(
    base: Workflow, steps: Callable[[Steps], Any], run_id: str
) -> tuple[Workflow, list[str], list[Exit]]:
    """A copy of ``base`` grown by ``steps`` from its open ends; the added node ids; the ends.

    Raises ``UsageError`` when there is no open end, when ``steps`` adds nothing, or when it
    changed what the graph already had (a run in flight relies on every existing node).
    """
    grown = base.copy()
    G = grown.graph
    ends = open_ends(G)
    if not ends:
        raise UsageError(
            f"run {run_id}: its graph has no open end to grow from (every path ends at an end "
            "node, loops back or fails); nothing was appended"
        )
    builder = Steps(G, ends, labels=end_labels(G, ends))
    steps(builder)
    added = [n for n in G.nodes if n not in base.graph]
    _refuse_changes(base.graph, G, ends, run_id)
    if not added and G.number_of_edges() == base.graph.number_of_edges():
        raise UsageError(
            f"run {run_id}: the steps given to append() added nothing; call builder verbs "
            "on the builder, e.g. lambda b: b.then('x')"
        )
    return grown, added, ends


def _refuse_changes(
    old: nx.MultiDiGraph, G: nx.MultiDiGraph, ends: list[Exit], run_id: str
) -> None:
    """Growth only adds: nodes, sagas, and edges from the open ends or from new nodes."""
    changed = [n for n in old.nodes if _text(G.nodes[n]) != _text(old.nodes[n])]
    old_edges = set(old.edges(keys=True))
    lost = [e for e in old_edges if not G.has_edge(*e)]
    open_ = set(ends)
    rerouted = [
        (u, k)
        for u, v, k in G.edges(keys=True)
        if (u, v, k) not in old_edges and u in old and (u, k) not in open_
    ]
    old_sagas = old.graph.get("sagas") or {}
    new_sagas = G.graph.get("sagas") or {}
    sagas = [s for s in old_sagas if _text(new_sagas.get(s)) != _text(old_sagas[s])]
    others = {k: v for k, v in G.graph.items() if k != "sagas"} != {
        k: v for k, v in old.graph.items() if k != "sagas"
    }
    if changed or lost or rerouted or sagas or others:
        what = [
            *(f"node {n!r} changed" for n in changed),
            *(f"edge {u!r} -{k}-> {v!r} removed" for u, v, k in sorted(lost)),
            *(f"outlet {u!r}.{k} rerouted" for u, k in rerouted),
            *(f"saga {s!r} changed" for s in sagas),
            *(["the workflow's attributes changed"] if others else []),
        ]
        raise UsageError(
            f"run {run_id}: append() may only add steps after the graph's ends, but "
            f"{'; '.join(what)}; nothing was appended"
        )


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
