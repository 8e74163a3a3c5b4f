"""Child process for ``test_crash.py``: drive one long run on a DuckDB file until it is done.

Usage: ``python crash_child.py DB_PATH LOG_PATH {inline|workers|batched}`` (batched: inline, with
``durability="batched"``)

The parent SIGKILLs this process at random moments and launches it again. The first launch (no
run in the file yet) starts the run; every later launch only reopens the file and keeps driving.
Each activity appends ``"<node_id> <attempt> <pid>"`` to LOG_PATH (fsynced) *before* it sleeps
and returns, so a kill after that line and before the step's checkpoint shows up as a second
line for the node.

Exit codes: 0 when the run is completed; 3 when driving ended with the run in another state;
anything else (an uncaught exception gives 1) means the child broke — never a kill (-9).

The module is also imported by the test (``make_registry``, ``make_flow``, ``NODES``); importing
it has no side effects. It is not named ``test_*`` so pytest does not collect it as a test.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import wfkit as wf

WORKFLOW = "crash.long"
SEQUENTIAL = [f"crash.step-{i:03d}" for i in range(1, 121)]
FAN_OUT_AFTER = range(10, 120, 10)  # a parallel of 3 branches + join after these steps
BRANCHES = {
    after: [f"crash.fan{after}-{name}" for name in ("a", "b", "c")] for after in FAN_OUT_AFTER
}
NODES = SEQUENTIAL + [node for branch in BRANCHES.values() for node in branch]
"""Every activity node of the workflow (node id == activity name)."""

STAGES: list[frozenset[str]] = []
"""Groups of steps that can be ready at the same time: one per sequential step, one per fan-out."""
for _i, _node in enumerate(SEQUENTIAL, 1):
    STAGES.append(frozenset([_node]))
    if _i in BRANCHES:
        STAGES.append(frozenset(BRANCHES[_i]))

SLEEP = (0.005, 0.020)  # seconds each activity sleeps after logging (kills land mid-activity)


def make_registry(log_path: str | Path) -> wf.ActivityRegistry:
    """A fresh registry with one logging activity per node of the workflow."""
    registry = wf.ActivityRegistry()
    rng = random.Random()

    def work(ctx: wf.ActivityContext[dict[str, Any]]) -> dict[str, Any]:
        pid = os.getpid()
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"{ctx.node_id} {ctx.attempt} {pid}\n")
            log.flush()
            os.fsync(log.fileno())
        time.sleep(rng.uniform(*SLEEP))
        ctx.data["done"][ctx.node_id] = True  # a key per node: a re-run cannot duplicate it
        return {"pid": pid, "attempt": ctx.attempt}

    for name in NODES:
        registry.register(name, work)
    return registry


def make_flow() -> wf.Workflow:
    """120 sequential steps; after every 10th (but the last) a 3-branch parallel and its join."""
    flow = wf.Workflow(WORKFLOW, version=1).start_with(SEQUENTIAL[0])
    for i, node in enumerate(SEQUENTIAL, 1):
        if i > 1:
            flow = flow.then(node)
        if i in BRANCHES:
            flow = flow.parallel(*[(lambda b, n=n: b.then(n)) for n in BRANCHES[i]])
    return flow


def main(db_path: str, log_path: str, mode: str) -> int:
    if mode not in ("inline", "workers", "batched"):
        print(f"unknown mode {mode!r}; use inline, workers or batched", file=sys.stderr)
        return 2
    durability = "batched" if mode == "batched" else "step"
    engine = wf.Engine(db_path, registry=make_registry(log_path), durability=durability)
    try:
        engine.register(make_flow())
        infos = engine.runs()
        if not infos:
            run = engine.start(WORKFLOW, {"done": {}})
            print(f"pid {os.getpid()}: started run {run.id}", flush=True)
        elif len(infos) == 1:
            run = engine.run(infos[0].run_id)
            print(f"pid {os.getpid()}: reopened run {run.id} ({run.status})", flush=True)
        else:
            print(f"expected at most one run, found {infos}", file=sys.stderr)
            return 4
        if mode in ("inline", "batched"):
            # a kill during a marked attempt is a crash: its retry waits for a timer (1 s)
            engine.run_until_idle(timeout=20)
        else:
            engine.start_workers(2)
            try:
                run.result(timeout=60)  # waits on the workers; raises if the run fails
            except (wf.WorkflowFailed, TimeoutError) as exc:
                print(f"run {run.id} did not complete: {exc}", file=sys.stderr)
            engine.stop()
        status = run.status
        if status != wf.RunStatus.COMPLETED:
            print(f"run {run.id} is {status.value}: {run.explain()}", file=sys.stderr)
            for event in run.history():
                print(f"  {event}", file=sys.stderr)
            return 3
        print(f"pid {os.getpid()}: run {run.id} completed", flush=True)
        return 0
    finally:
        engine.close()


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
