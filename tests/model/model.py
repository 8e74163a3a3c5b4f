"""A reference interpreter of docs/semantics.md: in memory, no threads, no store.

It reads the graph through ``wfkit.definition`` only and imports nothing from ``wfkit.engine``.
Comments cite the rule of docs/semantics.md each piece implements (``§2.5``). Activities are
simulated by :mod:`tests.model.plan`, the same functions the engine's test activities call.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import networkx as nx

from tests.model.plan import Call, Path, Plan, Result, compensation_result, step_result
from wfkit.definition.expressions import evaluate
from wfkit.definition.graph import saga_specs
from wfkit.definition.kinds import Node
from wfkit.definition.policy import OnFailure, Policy, SagaPolicy
from wfkit.definition.workflow import Workflow
from wfkit.errors import ExpressionError

Cell = tuple[tuple[int, int], ...]  # (frame id, index) of every enclosing frame, outermost first


@dataclass
class Token:
    node: str
    cell: Cell
    state: str = "new"  # ready, retry, timer, wait, suspended, unwinding, cancelling
    attempt: int = 1
    timer: str | None = None
    comp: int | None = None  # the unwind a compensation token works for
    entry: int | None = None  # the saga entry it compensates


@dataclass
class Frame:
    fork: str
    join: str
    n: int
    needed: int
    cell: Cell  # the cell that holds the fork
    items: list[Any] | None = None  # for_each only
    limit: int = 0
    next: int = 0
    done: int = 0
    failed: int = 0
    closed: bool = False


@dataclass
class Entry:  # §6.2
    node: str
    saga: str
    output: Any
    path: Path
    cell: Cell  # §6.2: a saga inside a branch or loop cell is one saga per cell
    state: str = "done"


@dataclass
class Unwind:  # §6.3
    entries: list[int]
    token: int
    error: str
    branch: bool


@dataclass
class Model:
    """One run of ``workflow`` on ``data`` with activities behaving as ``plan`` says."""

    workflow: Workflow
    data: dict[str, Any]
    plan: Plan
    now: datetime = datetime(2026, 1, 1)
    status: str = "pending"
    error: str | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    compensated: list[str] = field(default_factory=list)
    events: list[tuple[str, str | None]] = field(default_factory=list)
    tokens: dict[int, Token] = field(default_factory=dict)
    frames: dict[int, Frame] = field(default_factory=dict)
    visits: dict[tuple[Any, ...], int] = field(default_factory=dict)
    saga: list[Entry] = field(default_factory=list)
    unwinds: dict[int, Unwind] = field(default_factory=dict)
    ready: list[int] = field(default_factory=list)
    timers: list[tuple[datetime, int, int, str]] = field(default_factory=list)
    posted: list[tuple[str, str | None, dict[str, Any]]] = field(default_factory=list)
    in_round: set[int] = field(default_factory=set)
    taken: dict[int, Token] = field(default_factory=dict)  # removed with an attempt running
    ending: tuple[str, Any] | None = None  # a run end waiting for its drain (§7.1)
    ids: int = 0

    def __post_init__(self) -> None:
        G = self.workflow.graph
        self.G = G
        self.nodes = {n: Node.model_validate(G.nodes[n]) for n in G.nodes}
        self.edges = {(u, str(k)): v for u, v, k in G.edges(keys=True)}
        self.sagas = saga_specs(G)
        self.join_of = {n.config.fork: i for i, n in self.nodes.items() if n.kind == "join"}
        self.limit = {n: node.policy.max_visits for n, node in self.nodes.items()}
        for part in nx.strongly_connected_components(G):  # §9.1
            if len(part) > 1 or any(G.has_edge(n, n) for n in part):
                bound = max(self.limit[n] for n in part)
                self.limit.update({n: bound for n in part if self.limit[n] == 1})
        start = next(n for n, node in self.nodes.items() if node.kind == "start")
        self.status = "running"
        self.spawn(start, ())

    # --- helpers ------------------------------------------------------------------------------

    def new_id(self) -> int:
        self.ids += 1
        return self.ids

    def path(self, cell: Cell) -> Path:  # §1.6: for_each indices only
        return tuple(i for f, i in cell if self.frames[f].items is not None)

    def cell_name(self, cell: Cell) -> str | None:  # §2.4
        path = self.path(cell)
        return ".".join(map(str, path)) if path else None

    def chain(self, saga: str | None) -> list[str]:
        out: list[str] = []
        while saga is not None:
            out.append(saga)
            saga = self.sagas[saga].parent
        return out

    def scope(self, tok: Token) -> dict[str, Any]:  # §2.1 extra names, §1.6
        extra: dict[str, Any] = {"outputs": copy.deepcopy(self.outputs)}
        for f, i in reversed(tok.cell):
            if self.frames[f].items is not None:
                extra.update(item=self.frames[f].items[i], loop_index=i)  # type: ignore[index]
                break
        return extra

    def write(self, result: Result) -> None:  # §10.1-10.2: disjoint paths, later writer wins
        for top, key, value in result.writes:
            self.data.setdefault(top, {})[key] = value

    def record_output(self, node: str, cell: Cell, output: Any) -> None:  # §10.3
        if output is None:
            return
        name = self.cell_name(cell)
        if name is None:
            self.outputs[node] = output
        else:
            current = self.outputs.get(node)
            self.outputs[node] = {**(current if isinstance(current, dict) else {}), name: output}

    # --- moving tokens --------------------------------------------------------------------------

    def spawn(self, node: str, cell: Cell) -> None:
        tid = self.new_id()
        self.tokens[tid] = Token(node, cell)
        self.arrive(tid, node, moved=False)

    def leave(self, tid: int, outlet: str) -> None:  # §1.2 and §3
        tok = self.tokens[tid]
        node = self.nodes[tok.node]
        target = self.edges.get((tok.node, outlet))
        if target is not None:
            self.arrive(tid, target)
            return
        if node.kind == "wait" and outlet == "elapsed":
            self.leave(tid, "next")
            return
        if node.kind == "approval" and outlet in ("rejected", "expired"):
            out = self.outputs.get(tok.node, {})
            error = (
                f"approval {tok.node!r} was rejected by {out.get('actor')}: {out.get('comment')}"
                if outlet == "rejected"
                else f"approval {tok.node!r} expired with no decision"
            )
            self.fail(tid, error)
            return
        if outlet not in ("next", "completed", "approved"):
            self.events.append(("path.ended", tok.node))
        self.end_path(tid)

    def arrive(self, tid: int, target: str, moved: bool = True) -> None:
        tok = self.tokens[tid]
        if moved:
            self.commit_sagas(tok.node, target, tok.cell)
        tok.node, tok.state, tok.attempt = target, "new", 1
        node = self.nodes[target]
        if node.kind != "join":  # §1.3
            key = (target, *tok.cell[-1:])
            self.visits[key] = self.visits.get(key, 0) + 1
            if self.visits[key] > self.limit[target]:
                self.fail(tid, f"VisitLimitExceeded: {target!r}")
                return
        getattr(self, "enter_" + node.kind)(tid, tok, node)

    def end_path(self, tid: int, commit: bool = True) -> None:
        tok = self.tokens.pop(tid)
        if commit:
            self.commit_sagas(tok.node, None, tok.cell)

    def commit_sagas(self, source: str, target: str | None, cell: Cell) -> None:  # §6.2
        left = self.chain(self.nodes[source].saga)
        staying = self.chain(self.nodes[target].saga) if target is not None else []
        for saga in (s for s in left if s not in staying):
            spec = self.sagas[saga]
            if spec.parent is None or spec.policy == SagaPolicy.KEEP:
                for entry in self.saga:
                    if (
                        entry.state == "done"
                        and saga in self.chain(entry.saga)
                        and entry.cell[: len(cell)] == cell
                    ):
                        entry.state = "kept" if spec.parent else "committed"

    # --- node kinds (§2) ------------------------------------------------------------------------

    def enter_start(self, tid: int, tok: Token, node: Node) -> None:
        self.leave(tid, "next")

    def enter_end(self, tid: int, tok: Token, node: Node) -> None:
        self.end_path(tid)

    def enter_action(self, tid: int, tok: Token, node: Node) -> None:
        self.make_ready(tid, 1)

    def enter_decision(self, tid: int, tok: Token, node: Node) -> None:  # §2.1
        if node.activity:
            self.make_ready(tid, 1)
            return
        try:
            value = evaluate(node.config.expression, self.data, extra=self.scope(tok))
        except ExpressionError as exc:
            self.fail(tid, str(exc))
            return
        self.choose(tid, node, value)

    def choose(self, tid: int, node: Node, value: Any) -> None:
        name = ("true" if value else "false") if isinstance(value, bool) else value
        if not isinstance(name, str) or name not in node.outlets:
            if (self.tokens[tid].node, "fallback") in self.edges:  # §17.2
                self.leave(tid, "fallback")
                return
            self.fail(tid, f"decision gave {value!r}, which names none of its outlets")
            return
        self.leave(tid, name)

    def open_frame(self, tok: Token, fork: str, n: int, **extra: Any) -> int:
        config = self.nodes[self.join_of[fork]].config
        needed = {"all": n, "any": 1, "at_least": config.count}[config.mode]
        fid = self.new_id()
        self.frames[fid] = Frame(fork, self.join_of[fork], n, needed, tok.cell, **extra)
        return fid

    def enter_parallel(self, tid: int, tok: Token, node: Node) -> None:  # §2.2
        fid = self.open_frame(tok, tok.node, len(node.config.branches))
        self.end_path(tid, commit=False)
        for index, branch in enumerate(node.config.branches):
            if self.frames[fid].closed:
                break
            self.spawn(self.edges[(tok.node, branch)], (*tok.cell, (fid, index)))

    def enter_for_each(self, tid: int, tok: Token, node: Node) -> None:  # §2.3
        try:
            items = evaluate(node.config.items, self.data, extra=self.scope(tok))
        except ExpressionError as exc:
            self.fail(tid, str(exc))
            return
        if not isinstance(items, list):
            self.fail(tid, "items is not a list")
            return
        limit = node.config.max_parallelism or max(len(items), 1)
        fid = self.open_frame(tok, tok.node, len(items), items=items, limit=limit)
        self.end_path(tid, commit=False)
        self.launch(fid)
        self.decide(fid)

    def launch(self, fid: int) -> None:
        frame = self.frames[fid]
        while not frame.closed and frame.next < frame.n:
            if frame.next - frame.done - frame.failed >= frame.limit:
                break
            frame.next += 1
            self.spawn(self.edges[(frame.fork, "each")], (*frame.cell, (fid, frame.next - 1)))

    def enter_join(self, tid: int, tok: Token, node: Node) -> None:  # §2.5
        fid = tok.cell[-1][0]
        self.end_path(tid, commit=False)
        frame = self.frames[fid]
        if not frame.closed:
            frame.done += 1
            self.after_branch(fid)

    def after_branch(self, fid: int) -> None:
        if self.frames[fid].items is not None:
            self.launch(fid)
        self.decide(fid)

    def decide(self, fid: int) -> None:  # §2.5
        frame = self.frames[fid]
        satisfied = frame.done >= frame.needed or frame.n == 0
        if frame.closed or not (satisfied or frame.done + frame.failed >= frame.n):
            return
        frame.closed = True
        for other, t in list(self.tokens.items()):
            if any(f == fid for f, _ in t.cell):
                self.remove(other)
        outlet = "completed" if satisfied else "partial"
        target = self.edges.get((frame.join, outlet))
        if target is not None:
            self.spawn(target, frame.cell)
        elif not satisfied:
            tid = self.new_id()
            self.tokens[tid] = Token(frame.join, frame.cell, state="failed")
            self.fail(tid, f"join {frame.join!r} is partial", skip_outlet=True)

    def enter_delay(self, tid: int, tok: Token, node: Node) -> None:  # §2.6
        tok.state = "timer"
        self.start_timer(tid, "delay", node.config.duration)

    def enter_wait(self, tid: int, tok: Token, node: Node) -> None:  # §2.7
        key = self.wait_key(tok, node)
        for i, (name, k, payload) in enumerate(self.posted):
            if (name, k) == (node.config.signal, key):
                del self.posted[i]
                self.on_signal(tid, payload)
                return
        tok.state = "wait"
        if node.config.timeout is not None:
            self.start_timer(tid, "timeout", node.config.timeout)

    def wait_key(self, tok: Token, node: Node) -> str | None:
        if not node.config.correlate:
            return None
        value = evaluate(node.config.correlate, self.data, extra=self.scope(tok))
        return None if value is None else str(value)

    def on_signal(self, tid: int, payload: dict[str, Any]) -> None:
        tok = self.tokens[tid]
        node = self.nodes[tok.node]
        self.clear_timer(tid)
        for name, target in (node.config.bind or {}).items():
            if name in payload:
                *parents, last = target.split(".")
                doc = self.data
                for p in parents:
                    doc = doc.setdefault(p, {})
                doc[last] = payload[name]
        if payload:
            self.outputs[tok.node] = payload
        self.leave(tid, "next")

    def enter_approval(self, tid: int, tok: Token, node: Node) -> None:  # §2.8
        tok.state = "wait"
        if node.config.timeout is not None:
            self.start_timer(tid, "expiry", node.config.timeout)

    # --- timers ---------------------------------------------------------------------------------

    def start_timer(self, tid: int, kind: str, delay: timedelta) -> None:
        self.tokens[tid].timer = kind
        self.timers.append((self.now + delay, self.new_id(), tid, kind))

    def clear_timer(self, tid: int) -> None:
        self.tokens[tid].timer = None

    def fire_timers(self) -> None:  # §8.1: due timers fire earliest first
        due = sorted(t for t in self.timers if t[0] <= self.now)
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _, _, tid, kind in due:
            tok = self.tokens.get(tid)
            if tok is None or tok.timer != kind or self.status in ("failed", "cancelled"):
                continue
            tok.timer = None
            if kind == "retry":  # §4.1
                self.make_ready(tid, tok.attempt)
            elif kind == "delay":
                self.leave(tid, "next")
            elif kind == "timeout":
                self.leave(tid, "elapsed")
            else:
                self.leave(tid, "expired")

    # --- steps (§1.4, §4) -----------------------------------------------------------------------

    def make_ready(self, tid: int, attempt: int) -> None:
        tok = self.tokens[tid]
        tok.state, tok.attempt = "ready", attempt
        self.ready.append(tid)

    def run_until_idle(self) -> None:  # §8.1
        self.fire_timers()
        while self.ready:
            batch, self.ready = self.ready, []
            batch = [t for t in batch if t in self.tokens and self.tokens[t].state == "ready"]
            started = [(tid, self.tokens[tid].attempt, self.attempt(tid)) for tid in batch]
            self.in_round = {tid for tid, _, _ in started}
            for tid, attempt, result in started:
                self.in_round.discard(tid)
                self.outcome(tid, attempt, result)
        self.settle()

    def attempt(self, tid: int) -> Result:
        tok = self.tokens[tid]
        path = self.path(tok.cell)
        if tok.entry is not None:
            entry = self.saga[tok.entry]
            seen = json.dumps(entry.output, sort_keys=True)
            self.calls.append(("comp", tok.node, tok.attempt, entry.path, seen))
            return compensation_result(self.plan, tok.node, tok.attempt, entry.path, entry.output)
        self.calls.append(("step", tok.node, tok.attempt, path, None))
        return step_result(self.plan, tok.node, tok.attempt, path, copy.deepcopy(self.data))

    def outcome(self, tid: int, attempt: int, result: Result) -> None:
        tok = self.tokens.get(tid)
        if tok is None and tid in self.taken:  # §7.3: only a completed compensable step counts
            gone = self.taken.pop(tid)
            if result.kind == "ok" and gone.attempt == attempt:
                self.push(gone, result.output)
            return
        if tok is None or tok.attempt != attempt:
            return  # its token was removed: §7.3, the outcome changes nothing
        if tok.state == "cancelling":  # §7.1: recorded, goes no further
            if result.kind == "ok":
                self.write(result)
                self.record_output(tok.node, tok.cell, result.output)
                self.push(tok, result.output)
            del self.tokens[tid]
            self.drained()
            return
        if tok.entry is not None:
            self.compensation_outcome(tid, tok, result)
            return
        node = self.nodes[tok.node]
        if result.kind == "ok":
            self.write(result)
            self.record_output(tok.node, tok.cell, result.output)
            self.push(tok, result.output)
            if node.kind == "decision":
                self.choose(tid, node, result.output)
            else:
                self.leave(tid, "next")
            return
        if result.kind == "fallback":  # §4.2
            if (tok.node, "fallback") in self.edges:
                self.leave(tid, "fallback")
            else:
                self.fail(tid, "Fallback")
            return
        self.retry_or_fail(tid, node.policy, "failed")

    def retry_or_fail(self, tid: int, policy: Policy, error: str) -> None:  # §4.1, §6.4
        tok = self.tokens[tid]
        if tok.attempt >= policy.max_attempts:
            if tok.entry is None:
                self.fail(tid, error)
            else:
                tok.state = "suspended"
                self.status, self.error = "suspended", "compensation failed"
            return
        delay = policy.delay_before(tok.attempt + 1, jitter=False)
        if delay <= timedelta(0):
            self.make_ready(tid, tok.attempt + 1)
        else:
            tok.state, tok.attempt = "retry", tok.attempt + 1
            self.start_timer(tid, "retry", delay)

    # --- failure (§5) ---------------------------------------------------------------------------

    def fail(self, tid: int, error: str, skip_outlet: bool = False) -> None:  # §5.1
        tok = self.tokens[tid]
        node = self.nodes[tok.node]
        if not skip_outlet and (tok.node, "failed") in self.edges:
            self.leave(tid, "failed")
            return
        if node.policy.on_failure == OnFailure.SUSPEND:
            tok.state = "suspended"
            self.status, self.error = "suspended", error
            return
        if node.policy.on_failure == OnFailure.TERMINATE:
            self.fail_run(error)
            return
        if self.unwind_for(tid, error):
            return
        if tok.cell:
            self.branch_failed(tid)
            return
        self.fail_run(error)

    def branch_failed(self, tid: int) -> None:  # §5.5
        tok = self.tokens[tid]
        fid = tok.cell[-1][0]
        self.end_path(tid, commit=False)
        frame = self.frames[fid]
        if not frame.closed:
            frame.failed += 1
            self.after_branch(fid)

    def remove(self, tid: int) -> None:  # §7.3
        tok = self.tokens.pop(tid, None)
        if tok is not None and tid in self.in_round and tok.entry is None:
            self.taken[tid] = tok  # its attempt is running: a completed one is still pushed

    def fail_run(self, error: str) -> None:  # §5.6 with the drain of §7.1
        self.end_run("failed", error)

    def end_run(self, status: str, error: Any) -> None:
        for tid in list(self.tokens):
            if tid in self.in_round:
                self.tokens[tid].state = "cancelling"
            else:
                self.remove(tid)
        self.ending = (status, error)
        self.drained()

    def drained(self) -> None:
        if self.ending is None or any(t.state == "cancelling" for t in self.tokens.values()):
            return
        (status, error), self.ending = self.ending, None
        if status == "unwind":
            self.start_unwind(*error)
            return
        for entry in self.saga:
            if entry.state == "compensating":
                entry.state = status
        self.status, self.error = status, error
        self.ready = []

    # --- sagas (§6) -----------------------------------------------------------------------------

    def push(self, tok: Token, output: Any) -> None:  # §6.2: the entry keeps its visit's output
        node = self.nodes[tok.node]
        if node.compensation and node.saga:
            self.saga.append(Entry(tok.node, node.saga, output, self.path(tok.cell), tok.cell))

    def unwind_for(self, tid: int, error: str) -> bool:  # §5.1 4, §6.3
        tok = self.tokens[tid]
        chain = self.chain(self.nodes[tok.node].saga)
        if tok.cell:
            fork = self.frames[tok.cell[-1][0]].fork
            chain = [s for s in chain if s not in self.chain(self.nodes[fork].saga)]
        if not chain:
            return False
        tok.state = "unwinding"
        if tok.cell:
            self.start_unwind(tid, chain, error)
            return True
        self.status, self.error = "compensating", error
        for other in list(self.tokens):
            if other != tid and other not in self.in_round:
                self.remove(other)
            elif other != tid:
                self.tokens[other].state = "cancelling"
        self.ending = ("unwind", (tid, chain, error))
        self.drained()
        return True

    def start_unwind(self, tid: int, chain: list[str], error: str) -> None:
        scope, cell = set(chain), self.tokens[tid].cell
        entries = [
            i
            for i, e in enumerate(self.saga)
            if e.state == "done"
            and scope & set(self.chain(e.saga))
            and e.cell[: len(cell)] == cell  # §6.3: the failing cell's own steps
        ]
        uid = self.new_id()
        self.unwinds[uid] = Unwind(entries[::-1], tid, error, bool(self.tokens[tid].cell))
        self.next_compensation(uid)

    def next_compensation(self, uid: int) -> None:
        unwind = self.unwinds[uid]
        if unwind.entries:
            index = unwind.entries[0]
            self.saga[index].state = "compensating"
            tid = self.new_id()
            self.tokens[tid] = Token(self.saga[index].node, (), comp=uid, entry=index)
            self.make_ready(tid, 1)
            return
        del self.unwinds[uid]  # §6.3: the failure goes on outward
        if unwind.branch and unwind.token in self.tokens:
            self.branch_failed(unwind.token)
        else:
            self.fail_run(unwind.error)

    def compensation_outcome(self, tid: int, tok: Token, result: Result) -> None:
        if result.kind != "ok":
            node = self.nodes[tok.node]
            self.retry_or_fail(tid, node.compensation_policy or Policy(), "failed")
            return
        self.write(result)
        self.saga[tok.entry].state = "compensated"  # type: ignore[index]
        self.compensated.append(tok.node)
        self.advance(tid)

    def advance(self, tid: int) -> None:
        tok = self.tokens.pop(tid)
        unwind = self.unwinds[tok.comp]  # type: ignore[index]
        unwind.entries.pop(0)
        self.next_compensation(tok.comp)  # type: ignore[arg-type]

    # --- status and commands (§11, §5.2, §6.4, §2.7, §2.8) -------------------------------------

    def settle(self) -> None:
        if self.status not in ("pending", "running", "waiting"):
            return
        if not self.tokens:
            self.status = "completed"
        elif any(t.state in ("ready", "cancelling") for t in self.tokens.values()):
            self.status = "running"
        else:
            self.status = "waiting"

    def open_waits(self) -> list[tuple[int, str]]:
        return [(t, tok.node) for t, tok in self.tokens.items() if tok.state == "wait"]

    def signal(self, name: str, key: str | None, payload: dict[str, Any]) -> bool:
        for tid, node_id in self.open_waits():
            node = self.nodes[node_id]
            if node.kind == "wait" and node.config.signal == name:
                if self.wait_key(self.tokens[tid], node) == key:
                    self.on_signal(tid, payload)
                    return True
        return False

    def post_signal(self, name: str, key: str | None, payload: dict[str, Any]) -> bool:
        if self.signal(name, key, payload):
            return True
        self.posted.append((name, key, payload))
        return False

    def approve(
        self, node_id: str, approved: bool, actor: str, comment: str, path: Path = ()
    ) -> bool:  # §2.8: inside a for_each, the approval of the item at ``path``
        for tid, n in self.open_waits():
            tok = self.tokens[tid]
            if n == node_id and self.nodes[n].kind == "approval" and self.path(tok.cell) == path:
                self.clear_timer(tid)
                decision = {
                    "approved": approved,
                    "actor": actor,
                    "comment": comment,
                    "at": self.now.isoformat(),
                }
                self.record_output(n, tok.cell, decision)
                self.leave(tid, "approved" if approved else "rejected")
                return True
        return False

    def advance_clock(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @property
    def suspended_on(self) -> str | None:
        """ "step" or "compensation" when the run waits for an operator."""
        for tok in self.tokens.values():
            if tok.state == "suspended" and self.status == "suspended":
                return "compensation" if tok.entry is not None else "step"
        return None

    def resume(self) -> None:  # §5.2
        self.status = "running"
        for tid, tok in list(self.tokens.items()):
            if tok.state == "suspended":
                self.make_ready(tid, 1)

    def recover(self, action: str) -> None:  # §6.4
        tid, tok = next((t, k) for t, k in self.tokens.items() if k.state == "suspended")
        self.status = "running" if self.unwinds[tok.comp].branch else "compensating"  # type: ignore[index]
        if action == "retry":
            self.make_ready(tid, 1)
        elif action == "skip":
            self.saga[tok.entry].state = "skipped"  # type: ignore[index]
            self.advance(tid)
        else:
            self.saga[tok.entry].state = "abandoned"  # type: ignore[index]
            self.fail_run("compensation abandoned")
