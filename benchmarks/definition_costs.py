"""Definition costs: validation, DOT source and loading on graphs built to be expensive.

    python benchmarks/definition_costs.py                  # every workload, ~1 minute
    python benchmarks/definition_costs.py V1 R1            # some of them
    python benchmarks/definition_costs.py --timeout 300    # seconds a workload may take

V1  validate a chain of 16,000 actions
V2  validate a chain of 100,000 actions
V3  validate 2,000 nested sagas (95 KiB of JSON)
V4  validate 5,000 parallel/join pairs in a row
V5  validate 2,000 joins that their forks cannot reach, across two chains of 10,000 nodes
R1  to_dot of the 2,000 nested sagas
R2  to_dot of the chain of 100,000 actions
L1  Workflow.from_json of the 2,000 nested sagas
B1  build a chain of 1,000 steps of one activity with the builder (.then("card.charge"))
B2  the same, 10,000 steps
B3  the same, 100,000 steps

Each workload runs in a fresh interpreter (so that its peak RSS is its own, and a workload that
does not finish is stopped and reported as such) and prints one JSON line: seconds, microseconds
per node, peak RSS, its target and the ratio seconds / target (at most 1 meets the target). The
last lines compare the cost per node of V2 and V1, and of B3 and B1: about 1 when validation
and building are linear (target <= 1.5; PASS or SHORT). Nothing here asserts.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import networkx as nx

import wfkit as wf
from wfkit.definition import rendering

ROOT = Path(__file__).resolve().parents[1]


def chain(n: int) -> nx.MultiDiGraph:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    prev = "start"
    for i in range(n):
        G.add_node(f"a{i}", kind="action", activity="a")
        G.add_edge(prev, f"a{i}", key="next")
        prev = f"a{i}"
    return G


def nested_sagas(n: int) -> nx.MultiDiGraph:
    """``n`` sagas each nested in the one before, one step in the innermost (the report's)."""
    G = nx.MultiDiGraph()
    G.graph["sagas"] = {
        f"s{i}": {"parent": f"s{i - 1}", "policy": "unwind"} if i else {} for i in range(n)
    }
    G.add_node("start", kind="start")
    G.add_node("a", kind="action", activity="a", saga=f"s{n - 1}")
    G.add_edge("start", "a", key="next")
    return G


def fork_pairs(k: int) -> nx.MultiDiGraph:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    prev, outlet = "start", "next"
    for i in range(k):
        G.add_node(f"p{i}", kind="parallel", config={"branches": ["x", "y"]})
        G.add_node(f"x{i}", kind="action", activity="a")
        G.add_node(f"y{i}", kind="action", activity="a")
        G.add_node(f"j{i}", kind="join", config={"fork": f"p{i}"})
        G.add_edge(prev, f"p{i}", key=outlet)
        G.add_edge(f"p{i}", f"x{i}", key="x")
        G.add_edge(f"p{i}", f"y{i}", key="y")
        G.add_edge(f"x{i}", f"j{i}", key="next")
        G.add_edge(f"y{i}", f"j{i}", key="next")
        prev, outlet = f"j{i}", "completed"
    return G


def unreachable_joins(k: int, n: int) -> nx.MultiDiGraph:
    """``k`` forks leading into chain A, their joins fed by chain B: no join is reachable.

    One search per join (the old rule) walks a whole chain each time: ``k * n`` steps.
    """
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    for side in "AB":
        for i in range(n):
            G.add_node(f"{side}{i}", kind="action", activity="a")
            if i:
                G.add_edge(f"{side}{i - 1}", f"{side}{i}", key="next")
    G.add_edge("start", "A0", key="next")
    for i in range(k):
        G.add_node(f"p{i}", kind="parallel", config={"branches": ["x"]})
        G.add_node(f"j{i}", kind="join", config={"fork": f"p{i}"})
        G.add_edge(f"p{i}", "A0", key="x")
        G.add_edge(f"B{n - 1}", f"j{i}", key=f"to-{i}")
    return G


def nested_json(n: int) -> str:
    return wf.Workflow.from_graph("nested", 1, nested_sagas(n)).to_json()


def build_chain(n: int) -> wf.Workflow:
    """``n`` steps of one activity: ``card.charge``, ``card.charge-2``... (the builder numbers)."""
    flow = wf.Workflow("chain", 1).start_with("card.charge")
    for _ in range(n - 1):
        flow.then("card.charge")
    return flow


def validate(G: nx.MultiDiGraph) -> list[wf.Problem]:
    return wf.validate(G, registry=None)


Setup = Callable[[], Any]
Measure = Callable[[Any], object]

WORKLOADS: dict[str, tuple[str, Setup, Measure, float]] = {
    # name: (what, build the input, the measured call, target seconds)
    "V1": ("validate chain 16,000", lambda: chain(16_000), validate, 1.6),
    "V2": ("validate chain 100,000", lambda: chain(100_000), validate, 10.0),
    "V3": (
        "validate 2,000 nested sagas",
        lambda: nested_sagas(2_000),
        validate,
        0.5,
    ),
    "V4": ("validate 5,000 fork/join pairs", lambda: fork_pairs(5_000), validate, 2.0),
    "V5": (
        "validate 2,000 unreachable joins, 2 x 10,000 chain",
        lambda: unreachable_joins(2_000, 10_000),
        validate,
        2.0,
    ),
    "R1": ("to_dot 2,000 nested sagas", lambda: nested_sagas(2_000), rendering.to_dot, 0.5),
    "R2": ("to_dot chain 100,000", lambda: chain(100_000), rendering.to_dot, 5.0),
    "L1": (
        "from_json 2,000 nested sagas",
        lambda: nested_json(2_000),
        wf.Workflow.from_json,
        0.5,
    ),
    "B1": ("build chain 1,000", lambda: 1_000, build_chain, 0.1),
    "B2": ("build chain 10,000", lambda: 10_000, build_chain, 1.0),
    "B3": ("build chain 100,000", lambda: 100_000, build_chain, 10.0),
}


def run_one(name: str) -> dict[str, object]:
    """In the child: build the input, then time the call and read the peak RSS."""
    what, setup, measure, target = WORKLOADS[name]
    subject = setup()
    if isinstance(subject, int):  # a builder workload: the number of steps to build
        size = subject
    elif isinstance(subject, nx.MultiDiGraph):
        size = len(subject)
    else:
        size = node_count(subject)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    result = measure(subject)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    figures: dict[str, object] = {
        "workload": name,
        "what": what,
        "nodes": size,
        "seconds": round(seconds, 3),
        "us_per_node": round(seconds / size * 1e6, 2) if size >= 1000 else None,
        "peak_rss_mib": round(peak / 1024, 1),
        "rss_growth_mib": round((peak - base) / 1024, 1),
        "target_s": target,
        "ratio": round(seconds / target, 3),
        "met": seconds <= target,
    }
    if isinstance(subject, str):
        figures["json_kib"] = round(len(subject.encode()) / 1024, 1)
    if isinstance(result, list):
        figures["problem_codes"] = sorted({p.code for p in result})
    return figures


def node_count(text: str) -> int:
    return len(json.loads(text)["graph"]["nodes"])


def main(argv: list[str]) -> None:
    timeout = 120.0
    if "--timeout" in argv:
        at = argv.index("--timeout")
        timeout = float(argv[at + 1])
        del argv[at : at + 2]
    if argv[:1] == ["--one"]:
        print(json.dumps(run_one(argv[1])), flush=True)
        return
    per_node: dict[str, float] = {}
    names = argv or list(WORKLOADS)
    for name in names:
        what, _, _, target = WORKLOADS[name]
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--one", name],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=ROOT,
            )
        except subprocess.TimeoutExpired:
            line = {"workload": name, "what": what, "seconds": f"> {timeout:g} (stopped)"}
            print(json.dumps(line | {"target_s": target, "met": False}), flush=True)
            continue
        if done.returncode != 0:
            error = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            print(json.dumps({"workload": name, "what": what, "error": error[0]}), flush=True)
            continue
        print(done.stdout.strip(), flush=True)
        figures = json.loads(done.stdout)
        if figures["us_per_node"] is not None:
            per_node[name] = figures["us_per_node"]
    # linear: a graph 6.25 (V) or 100 (B) times larger costs about the same per node
    for small, large in (("V1", "V2"), ("B1", "B3")):
        if small not in names or large not in names:
            continue
        line: dict[str, object] = {"check": f"{large}_vs_{small}_us_per_node", "ratio": None}
        met = small in per_node and large in per_node  # a stopped workload is SHORT
        if met:
            line["ratio"] = ratio = round(per_node[large] / per_node[small], 3)
            met = ratio <= 1.5
        line |= {"target": 1.5, "met": met, "verdict": "PASS" if met else "SHORT"}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
