"""The builder DSL: verbs that append typed nodes to a ``networkx.MultiDiGraph``.

A builder keeps a *cursor*: the outlets ``(node, outlet)`` the next verb connects from. Each verb
adds a node, wires every cursor outlet to it and moves the cursor to the new node's continuing
outlet. Branch verbs (``if_``, ``decide``, ``parallel``, ``for_each``, ``saga``...) take callables
that receive a :class:`Steps` builder starting at the branch outlet; where the branches end, their
cursors merge back into the main one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, Self

import networkx as nx
from pydantic import BaseModel, ValidationError

from wfkit.definition import keys
from wfkit.definition.graph import SagaSpec
from wfkit.definition.kinds import Node, NodeKind, spec_for
from wfkit.definition.naming import FreeIds
from wfkit.definition.policy import OnFailure, Policy, SagaPolicy
from wfkit.definition.splicing import splice_graph
from wfkit.errors import UsageError

if TYPE_CHECKING:
    from wfkit.definition.workflow import Workflow

__all__ = ["AtLeast", "Branch", "JoinMode", "Steps", "at_least"]

Branch = Callable[["Steps"], Any]
"""A branch body: a callable that appends steps to the builder it is given."""

Exit = tuple[str, str]


@dataclass(frozen=True)
class AtLeast:
    """Join mode: continue once ``count`` branches completed."""

    count: int


def at_least(n: int) -> AtLeast:
    """Join mode for ``parallel``/``for_each``: continue once ``n`` branches have completed.

    Examples
    --------
    >>> at_least(2)
    AtLeast(count=2)
    """
    if not isinstance(n, int) or n < 1:
        raise UsageError(f"at_least needs a whole number of branches of 1 or more, got {n!r}")
    return AtLeast(n)


JoinMode = Literal["all", "any"] | AtLeast


@dataclass
class _Names:
    """Where the searches for free node and saga ids stopped, shared by the builders over one
    graph (see :mod:`wfkit.definition.naming`)."""

    nodes: FreeIds = field(default_factory=FreeIds)
    sagas: FreeIds = field(default_factory=FreeIds)


class Steps:
    """Builder verbs over a shared graph; :class:`~wfkit.Workflow` is the top-level one."""

    def __init__(
        self,
        graph: nx.MultiDiGraph,
        cursor: list[Exit],
        saga: str | None = None,
        labels: dict[Exit, str] | None = None,
        names: _Names | None = None,
    ) -> None:
        self._graph = graph
        self._cursor: list[Exit] = list(cursor)
        self._saga = saga
        self._last: str | None = None
        # labels for outlets whose edge is drawn later (an if_ branch left empty)
        self._labels: dict[Exit, str] = {} if labels is None else labels
        self._names = _Names() if names is None else names

    # --- plumbing -----------------------------------------------------------------------------

    def _add(self, node_id: str, **attrs: Any) -> str:
        if node_id in self._graph:
            raise UsageError(
                f"a node called {node_id!r} already exists; give this step another id= or name"
            )
        if self._saga is not None:
            attrs.setdefault(keys.SAGA, self._saga)
        try:
            node = Node.model_validate({k: v for k, v in attrs.items() if v is not None})
        except ValidationError as exc:
            raise UsageError(f"step {node_id!r} is malformed: {exc}") from None
        self._names.nodes.sync(self._graph._node)
        self._graph.add_node(node_id, **node.to_attrs())
        self._names.nodes.note(self._graph._node)
        self._connect(node_id)
        self._last = node_id
        return node_id

    def _node_id(self, base: str, *, numbered: bool = False) -> str:
        """``base``, ``base-2``... (``base-1``... if ``numbered``): the first not in the graph."""
        # networkx keeps the nodes in G._node, an insertion-ordered dict (its subclassing API)
        return self._names.nodes.pick(self._graph._node, base, numbered=numbered)

    def _connect(self, target: str) -> None:
        for u, outlet in self._cursor:
            label = self._labels.get((u, outlet))
            extra = {keys.EDGE_LABEL: label} if label else {}
            self._graph.add_edge(u, target, key=outlet, **extra)
        self._cursor = []

    def _branch(self, body: Branch | None, start: Exit) -> list[Exit]:
        """Run ``body`` from ``start``; return the outlets where it ends."""
        if body is None:
            return [start]
        sub = Steps(self._graph, [start], self._saga, self._labels, self._names)
        body(sub)
        return sub._cursor

    def _require_cursor(self, verb: str) -> None:
        if not self._cursor:
            raise UsageError(
                f"{verb}() has nothing to follow: call start_with() first, or the previous "
                "step ended every path (end() or goto())"
            )

    def _last_node(self, verb: str) -> str:
        if self._last is None:
            raise UsageError(f"{verb}() annotates the step just appended, but there is none yet")
        return self._last

    @staticmethod
    def _policy(policy: Policy | Mapping[str, Any] | None, fields: Mapping[str, Any]) -> Any:
        if policy is None and not fields:
            return None
        base = policy.model_dump() if isinstance(policy, Policy) else dict(policy or {})
        try:
            return Policy.model_validate({**base, **fields})
        except ValidationError as exc:
            raise UsageError(f"bad policy: {exc}") from None

    # --- verbs ----------------------------------------------------------------------------------

    def then(
        self,
        activity: str,
        *,
        id: str | None = None,
        label: str | None = None,
        policy: Policy | Mapping[str, Any] | None = None,
        **policy_fields: Any,
    ) -> Self:
        """Append an action running the registered ``activity``.

        The node id is the activity name (``card.charge``, then ``card.charge-2``...) unless
        ``id`` is given; ``policy``/keyword fields (``max_attempts=5``...) set its policy.
        """
        self._require_cursor("then")
        node_id = id or self._node_id(activity)
        self._add(
            node_id,
            kind=NodeKind.ACTION,
            activity=activity,
            label=label,
            policy=self._policy(policy, policy_fields),
        )
        self._cursor = [(node_id, "next")]
        return self

    def if_(
        self,
        expression: str,
        then: Branch | None = None,
        otherwise: Branch | None = None,
        *,
        id: str | None = None,
        label: str | None = None,
    ) -> Self:
        """Branch on a safe ``expression`` over the data: ``then`` if true, else ``otherwise``."""
        self._require_cursor("if_")
        node_id = id or self._node_id("if", numbered=True)
        self._add(
            node_id,
            kind=NodeKind.DECISION,
            config={"expression": expression, "branches": ["true", "false"]},
            label=label,
        )
        self._labels[(node_id, "true")] = expression
        self._cursor = self._branch(then, (node_id, "true")) + self._branch(
            otherwise, (node_id, "false")
        )
        return self

    def decide(
        self,
        activity: str,
        branches: Mapping[str, Branch | None],
        *,
        id: str | None = None,
        label: str | None = None,
    ) -> Self:
        """A registered function picks one of ``branches`` by returning its name."""
        self._require_cursor("decide")
        if not branches:
            raise UsageError("decide() needs at least one named branch")
        node_id = id or self._node_id(activity)
        self._add(
            node_id,
            kind=NodeKind.DECISION,
            activity=activity,
            config={"branches": list(branches)},
            label=label,
        )
        exits: list[Exit] = []
        for name, body in branches.items():
            exits += self._branch(body, (node_id, name))
        self._cursor = exits
        return self

    def parallel(
        self,
        *branches: Branch,
        join: JoinMode = "all",
        on_partial: Branch | None = None,
        id: str | None = None,
        **named: Branch,
    ) -> Self:
        """Run branches at the same time, then join them (``all``, ``any`` or ``at_least(n)``).

        Positional branches are named ``branch-1``, ``branch-2``...; keyword branches keep their
        names. ``on_partial`` runs when the join is partial (some branches failed).
        """
        self._require_cursor("parallel")
        bodies = {f"branch-{i}": b for i, b in enumerate(branches, 1)} | dict(named)
        if not bodies:
            raise UsageError("parallel() needs at least one branch")
        fork = id or self._node_id("parallel", numbered=True)
        self._add(fork, kind=NodeKind.PARALLEL, config={"branches": list(bodies)})
        exits: list[Exit] = []
        for name, body in bodies.items():
            exits += self._branch(body, (fork, name))
        self._cursor = exits
        return self._join(fork, join, on_partial)

    def for_each(
        self,
        items: str,
        body: Branch,
        *,
        max_parallelism: int | None = None,
        join: JoinMode = "all",
        on_partial: Branch | None = None,
        id: str | None = None,
    ) -> Self:
        """Run ``body`` once per item of the list the ``items`` expression yields.

        Inside the body, activities see ``ctx.item`` and ``ctx.loop_index``. Without
        ``on_partial``, a partial join fails the step and the failure rules apply.
        """
        self._require_cursor("for_each")
        fork = id or self._node_id("for_each", numbered=True)
        self._add(
            fork,
            kind=NodeKind.FOR_EACH,
            config={"items": items, "max_parallelism": max_parallelism},
        )
        self._cursor = self._branch(body, (fork, "each"))
        return self._join(fork, join, on_partial)

    def _join(self, fork: str, join: JoinMode, on_partial: Branch | None) -> Self:
        if isinstance(join, AtLeast):
            config: dict[str, Any] = {"fork": fork, "mode": "at_least", "count": join.count}
        elif join in ("all", "any"):
            config = {"fork": fork, "mode": join}
        else:
            raise UsageError(f"join must be 'all', 'any' or wf.at_least(n), got {join!r}")
        if not self._cursor:
            raise UsageError(f"every branch of {fork!r} ended; nothing is left to join")
        join_id = self._node_id("join", numbered=True)
        self._add(join_id, kind=NodeKind.JOIN, config=config)
        self._cursor = [(join_id, "completed")]
        if on_partial is not None:
            self._cursor += self._branch(on_partial, (join_id, "partial"))
        self._last = join_id
        return self

    def delay(self, duration: timedelta | str, *, id: str | None = None) -> Self:
        """Wait ``duration`` (``"7d"``, ``timedelta``...) on a durable timer."""
        self._require_cursor("delay")
        node_id = id or self._node_id("delay", numbered=True)
        self._add(node_id, kind=NodeKind.DELAY, config={"duration": duration})
        self._cursor = [(node_id, "next")]
        return self

    def wait_for_signal(
        self,
        name: str,
        *,
        correlate: str | None = None,
        bind: Mapping[str, str] | str | None = None,
        timeout: timedelta | str | None = None,
        on_timeout: Branch | None = None,
        id: str | None = None,
        payload: type[BaseModel] | str | None = None,
    ) -> Self:
        """Park until signal ``name`` arrives with the key ``correlate`` yields.

        ``bind`` maps payload fields to data fields (or names a registered binder, called as
        ``binder(data, payload)`` to change the data dict). ``payload`` is the pydantic model a
        payload must fit (a bad payload is refused and the wait stays). With ``timeout``, the
        wait leaves through ``elapsed`` into ``on_timeout``; without ``on_timeout`` it goes on
        to the next step as if the signal came, its payload unbound.
        """
        self._require_cursor("wait_for_signal")
        node_id = id or name
        self._add(
            node_id,
            kind=NodeKind.WAIT,
            config={
                "signal": name,
                "correlate": correlate,
                "bind": dict(bind) if isinstance(bind, Mapping) else bind,
                "timeout": timeout,
                "payload": _model_path(payload),
            },
        )
        self._cursor = [(node_id, "next")]
        if on_timeout is not None:
            self._cursor += self._branch(on_timeout, (node_id, "elapsed"))
        return self

    def approval(
        self,
        name: str,
        *,
        timeout: timedelta | str | None = None,
        assignees: tuple[str, ...] | list[str] = (),
        on_reject: Branch | None = None,
        on_expire: Branch | None = None,
    ) -> Self:
        """Park for a person to approve (continue) or reject; ``name`` is the node id.

        A rejection goes into ``on_reject`` and an expiry (after ``timeout``) into ``on_expire``;
        where one is not given, it fails the step and the failure rules apply (a saga unwinds,
        the run fails).
        """
        self._require_cursor("approval")
        self._add(
            name,
            kind=NodeKind.APPROVAL,
            config={"timeout": timeout, "assignees": list(assignees)},
        )
        self._cursor = [(name, "approved")]
        if on_reject is not None:
            self._cursor += self._branch(on_reject, (name, "rejected"))
        if on_expire is not None:
            self._cursor += self._branch(on_expire, (name, "expired"))
        return self

    def call(
        self,
        workflow_id: str,
        version: int | None = None,
        input: Mapping[str, str] | None = None,
        bind: Mapping[str, str] | None = None,
        *,
        id: str | None = None,
        label: str | None = None,
        on_failed: Branch | None = None,
    ) -> Self:
        """Run the registered workflow ``workflow_id`` as a child run and wait for it to end.

        The node id is ``call-<workflow_id>`` (``call-payment``, then ``call-payment-2``...)
        unless ``id`` is given. ``input`` maps child data fields to safe expressions over this
        run's data (``{"amount": "total"}``); without it the whole document is passed. Either
        way the child's data model must accept it, or the call fails. ``bind`` maps child fields
        to fields of this run (``{"receipt": "receipt"}``), copied back when the child
        completes; without it nothing is copied back. ``version`` pins the child's version
        (the latest registered when the call starts by default). A child that fails or is
        cancelled fails the call: it leaves through ``on_failed`` where given, else the failure
        rules apply. A call is never retried.

        Examples
        --------
        >>> import wfkit as wf
        >>> flow = wf.Workflow("shop", 1).start_with().call(
        ...     "payment", input={"amount": "total"}, bind={"receipt": "receipt"})
        >>> flow.node("call-payment").config.input
        {'amount': 'total'}
        """
        self._require_cursor("call")
        if not isinstance(workflow_id, str) or not workflow_id.strip():
            raise UsageError(f"call() needs a workflow id, got {workflow_id!r}")
        node_id = id or self._node_id(f"call-{workflow_id}")
        self._add(
            node_id,
            kind=NodeKind.CALL,
            config={
                "workflow_id": workflow_id,
                "version": version,
                "input": _mapping("input", input),
                "bind": _mapping("bind", bind),
            },
            label=label,
        )
        self._cursor = [(node_id, "next")]
        if on_failed is not None:
            self._cursor += self._branch(on_failed, (node_id, "failed"))
        return self

    def saga(
        self,
        body: Branch,
        *,
        policy: SagaPolicy | str | None = None,
        id: str | None = None,
        label: str | None = None,
    ) -> Self:
        """Group steps whose compensations unwind in reverse order when one fails for good.

        A saga nested in another must say what an outer unwind does with it: ``policy="unwind"``
        (undo it too) or ``"keep"`` (a committed inner saga stands).
        """
        sagas: dict[str, Any] = self._graph.graph.setdefault(keys.SAGAS, {})
        self._names.sagas.sync(sagas)
        saga_id = id or self._names.sagas.pick(sagas, "saga", numbered=True)
        if saga_id in sagas:
            raise UsageError(f"a saga called {saga_id!r} already exists; pass another id=")
        if self._saga is not None and policy is None:
            raise UsageError(
                f"saga {saga_id!r} is nested in {self._saga!r}: say what an outer unwind does "
                "with it, saga(..., policy='unwind') or saga(..., policy='keep')"
            )
        spec = SagaSpec(
            parent=self._saga, policy=SagaPolicy(policy) if policy else None, label=label
        )
        sagas[saga_id] = spec.model_dump(mode="json", exclude_none=True)
        self._names.sagas.note(sagas)
        sub = Steps(self._graph, self._cursor, saga_id, self._labels, self._names)
        body(sub)
        self._cursor = sub._cursor
        self._last = sub._last
        return self

    def compensate_with(
        self, activity: str, *, policy: Policy | Mapping[str, Any] | None = None
    ) -> Self:
        """Give the step just appended a compensation: ``activity`` undoes it in an unwind."""
        node_id = self._last_node("compensate_with")
        attrs = self._graph.nodes[node_id]
        if not ((spec := spec_for(attrs.get(keys.KIND))) and spec.compensable):
            raise UsageError(
                f"compensate_with() follows an action, but {node_id!r} is a {attrs.get('kind')}"
            )
        attrs[keys.COMPENSATION] = activity
        compensation_policy = self._policy(policy, {})
        if compensation_policy is not None:
            attrs[keys.COMPENSATION_POLICY] = compensation_policy.model_dump(
                mode="json", exclude_defaults=True
            )
        return self

    def on_failure(self, policy: OnFailure | str) -> Self:
        """Set what the step just appended does once it failed for good."""
        try:
            value = OnFailure(policy)
        except ValueError:
            choices = ", ".join(repr(p.value) for p in OnFailure)
            raise UsageError(f"on_failure({policy!r}): use one of {choices}") from None
        return self.with_policy(on_failure=value)

    def with_policy(self, **fields: Any) -> Self:
        """Change policy fields (``max_attempts=5``, ``max_visits=3``...) of the last step."""
        node_id = self._last_node("with_policy")
        attrs = self._graph.nodes[node_id]
        merged = self._policy(attrs.get(keys.POLICY), fields)
        dumped = merged.model_dump(mode="json", exclude_defaults=True)
        if dumped:
            attrs[keys.POLICY] = dumped
        else:
            attrs.pop(keys.POLICY, None)
        return self

    def on_failed(self, body: Branch) -> Self:
        """Route the last action's (or call's) ``failed`` outlet into ``body``."""
        return self._outlet_branch("on_failed", "failed", body)

    def on_fallback(self, body: Branch) -> Self:
        """Route the last action's ``fallback`` outlet into ``body``."""
        return self._outlet_branch("on_fallback", "fallback", body)

    def _outlet_branch(self, verb: str, outlet: str, body: Branch) -> Self:
        node_id = self._last_node(verb)
        spec = spec_for(self._graph.nodes[node_id].get(keys.KIND))
        if spec is None or outlet not in (o.name for o in spec.outlets):
            raise UsageError(f"{verb}() follows an action, but {node_id!r} is not one")
        self._cursor += self._branch(body, (node_id, outlet))
        return self

    def goto(self, node_id: str) -> Self:
        """Connect the open paths to an existing node (a loop back needs ``max_visits``)."""
        self._require_cursor("goto")
        if node_id not in self._graph:
            raise UsageError(f"goto({node_id!r}): there is no such node; pick an existing id")
        self._connect(node_id)
        return self

    def splice(self, other: Workflow) -> Self:
        """Graft ``other``'s steps in here, as if they had been written with this builder.

        Every node ``other``'s start reaches (its start left out) is copied with its edges,
        policies, compensations, labels, config and sagas, and the open paths lead into the
        first of them; the next verb continues from every end of ``other`` (each outlet where
        one of its paths ends: ``next`` of its last steps, open decision branches, a join's
        ``completed``, an approval's ``approved``). Node ids are kept where they do not clash;
        a clashing id becomes ``<other.id>.<node>`` (``-2``, ``-3``... while that is taken too),
        saga ids likewise. Inside a saga body the spliced steps join that saga, and ``other``'s
        outermost sagas nest in it (they need a policy). The host's data model and
        ``strict_merges`` stand: ``validate()`` checks the spliced expressions against the
        host's model. The step just appended (for ``compensate_with``...) is ``other``'s last.

        Examples
        --------
        >>> import wfkit as wf
        >>> pay = wf.Workflow("pay").start_with("card.charge").then("mail.receipt")
        >>> flow = wf.Workflow("shop").start_with("mail.receipt").splice(pay).then("ship")
        >>> list(flow.graph.nodes)
        ['start', 'mail.receipt', 'card.charge', 'pay.mail.receipt', 'ship']
        """
        self._require_cursor("splice")
        graph = getattr(other, "graph", None)
        if not isinstance(graph, nx.MultiDiGraph):
            raise UsageError(f"splice() takes a wf.Workflow, got {type(other).__name__}")
        part = splice_graph(
            self._graph,
            graph,
            prefix=str(other.id),
            saga=self._saga,
            free_ids=self._names.nodes,
            free_saga_ids=self._names.sagas,
        )
        self._connect(part.entry)
        self._cursor = list(part.ends)
        self._labels.update(part.labels)
        self._last = part.last
        return self

    def end(self, *, id: str | None = None) -> Self:
        """End every open path at an explicit end node."""
        self._require_cursor("end")
        self._add(id or self._node_id("end"), kind=NodeKind.END)
        return self


def _mapping(what: str, value: Mapping[str, str] | None) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise UsageError(
            f"call() {what} must map child fields to strings, e.g. {{'amount': 'total'}}; "
            f"got {type(value).__name__}"
        )
    return dict(value)


def _model_path(model: type[BaseModel] | str | None) -> str | None:
    if model is None or isinstance(model, str):
        return model
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise UsageError(f"payload must be a pydantic model class, got {model!r}")
    return f"{model.__module__}:{model.__qualname__}"
