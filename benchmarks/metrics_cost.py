"""What the engine's metrics cost on the hot path: runs per second with and without them.

    python benchmarks/metrics_cost.py [RUNS] [STEPS] [ROUNDS]

RUNS runs of STEPS sequential trivial activities on a fresh DuckDB file in a temporary folder,
driven by four worker threads, with ``durability="batched"`` (where per-attempt overhead shows
most): first without metrics, then with :func:`wfkit.engine.metrics.enable_metrics`, ROUNDS
times each, alternating. Prints JSON lines: the best throughput of each, their ratio and the
target (metrics cost at most 3% of the throughput). Asserts nothing.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import wfkit as wf
from wfkit.engine.metrics import enable_metrics

TARGET = 0.97  # throughput with metrics / without, at least


def once(folder: Path, runs: int, steps: int, metrics: bool, n: int) -> float:
    reg = wf.ActivityRegistry()
    reg.register("bench.step", lambda ctx: None)
    flow = wf.Workflow("bench-metrics", version=1).start_with("bench.step", id="s0")
    for i in range(1, steps):
        flow = flow.then("bench.step", id=f"s{i}")
    with wf.Engine(folder / f"m{n}.duckdb", registry=reg, durability="batched") as engine:
        engine.register(flow)
        if metrics:
            enable_metrics(engine)
        began = time.perf_counter()
        handles = [engine.start("bench-metrics", {}) for _ in range(runs)]
        engine.start_workers(threads=4)
        for handle in handles:
            handle.result(timeout=120)
        elapsed = time.perf_counter() - began
    return runs / elapsed


def main(argv: list[str]) -> None:
    runs = int(argv[1]) if len(argv) > 1 else 1000
    steps = int(argv[2]) if len(argv) > 2 else 5
    rounds = int(argv[3]) if len(argv) > 3 else 3
    best = {False: 0.0, True: 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for _ in range(rounds):
            for metrics in (False, True):
                rate = once(Path(tmp), runs, steps, metrics, n)
                n += 1
                best[metrics] = max(best[metrics], rate)
                print(json.dumps({"metrics": metrics, "runs_per_s": round(rate, 1)}), flush=True)
    ratio = best[True] / best[False]
    summary = {
        "runs": runs,
        "steps": steps,
        "best_without": round(best[False], 1),
        "best_with": round(best[True], 1),
        "ratio": round(ratio, 3),
        "target_ratio": TARGET,
        "meets_target": ratio >= TARGET,
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main(sys.argv)
